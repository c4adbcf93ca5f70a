package redistest

import (
	"context"
	"crypto/tls"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Cluster is a Redis Cluster of redis-server processes on loopback ports,
// started for one test and stopped when it ends.
type Cluster struct {
	// Nodes are the processes, in the order they were started: redis-cli
	// made the first ones primaries, but failovers change that; ask
	// Primaries.
	Nodes []*ClusterNode
}

// ClusterNode is one node of a Cluster. Kill and Restart (same port and
// directory, so it rejoins with its nodes.conf) simulate crashes.
type ClusterNode struct {
	*Server
	// ID is the node's cluster id (CLUSTER MYID).
	ID string
}

// clusterSettings make a failover quick and certain: a silent node is
// thought failed after 1 s; its replica may take over however long ago it
// heard from it; a full sync starts at once.
var clusterSettings = []string{
	"cluster-enabled yes",
	"cluster-config-file nodes.conf",
	"cluster-node-timeout 1000",
	"cluster-replica-validity-factor 0",
	"repl-diskless-sync-delay 0",
}

// StartCluster starts primaries+primaries*replicasPerPrimary redis-server
// processes with cluster mode on, each in a directory of its own, forms a
// cluster of them with redis-cli --cluster create (at least 3 primaries),
// and waits until every node reports cluster_state:ok with the same slot map
// and every replica's link to its primary is up. extra holds more config
// directives for every node, such as "appendonly yes".
func StartCluster(t testing.TB, primaries, replicasPerPrimary int, extra ...string) *Cluster {
	t.Helper()
	return startCluster(t, nil, primaries, replicasPerPrimary, extra)
}

// StartClusterTLS is StartCluster with TLS only: clients, replication and
// the cluster bus, with the files' certificate (for 127.0.0.1, the address
// every node announces, and files.ServerName) on every node.
func StartClusterTLS(t testing.TB, files TLSFiles, primaries, replicasPerPrimary int, extra ...string) *Cluster {
	t.Helper()
	conf := append([]string{
		"tls-cert-file " + files.CertFile,
		"tls-key-file " + files.KeyFile,
		"tls-ca-cert-file " + files.CAFile,
		"tls-auth-clients no",
		"tls-cluster yes",
		"tls-replication yes",
	}, extra...)
	return startCluster(t, &files, primaries, replicasPerPrimary, conf)
}

func startCluster(t testing.TB, files *TLSFiles, primaries, replicasPerPrimary int, extra []string) *Cluster {
	t.Helper()
	serverBin := Binary(t, "redis-server")
	cliBin := Binary(t, "redis-cli")
	var clientTLS *tls.Config
	var cliTLS []string
	if files != nil {
		clientTLS = files.ClientConfig(t)
		cliTLS = []string{"--tls", "--cacert", files.CAFile}
	}
	c := &Cluster{}
	conf := append(slices.Clone(clusterSettings), extra...)
	for range primaries * (1 + replicasPerPrimary) {
		c.Nodes = append(c.Nodes, startClusterNode(t, serverBin, clientTLS, conf))
	}

	args := append(cliTLS, "--cluster", "create")
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerPrimary), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cliBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, n := range c.Nodes {
		id, err := redis.String(n.Do("CLUSTER", "MYID"))
		if err != nil {
			t.Fatalf("CLUSTER MYID at %s: %v", n.Addr, err)
		}
		n.ID = id
	}
	c.WaitStateOK(t)
	c.WaitForReplicasUp(t)
	return c
}

// startClusterNode starts one node on a port p such that p and its cluster
// bus port p+10000 are free, both below the kernel's range of ephemeral
// ports (so that a node restarted on them finds them free).
// With clientTLS the node listens for TLS only, on p.
func startClusterNode(t testing.TB, bin string, clientTLS *tls.Config, conf []string) *ClusterNode {
	t.Helper()
	var lastErr error
	for range 10 {
		port := clusterNodePort()
		if !portFree(port) || !portFree(port+clusterBusOffset) {
			continue
		}
		s := &Server{Dir: t.TempDir(), Addr: "127.0.0.1:" + strconv.Itoa(port), args: append([]string{bin}, conf...), tls: clientTLS}
		if lastErr = s.start(port); lastErr != nil {
			continue
		}
		// Another test's server may have taken the port between the check
		// and the start: then the one answering is not this process.
		if err := s.checkPID(); err != nil {
			lastErr = err
			s.Stop()
			continue
		}
		t.Cleanup(s.Stop)
		return &ClusterNode{Server: s}
	}
	t.Fatalf("start a cluster node: %v", lastErr)
	return nil
}

// clusterBusOffset is what redis-server adds to a node's port for its
// cluster bus port.
const clusterBusOffset = 10000

// Test ports are picked below firstEphemeralPort, where Linux's ephemeral
// ports begin: the kernel hands those out to listeners on port 0 and to the
// source ports of connections, so a port of that range released for a
// moment may be taken. Cluster nodes take ports from lowestTestPort up to
// clusterPortsEnd, so their bus ports lie from 20000 up to
// clusterPortsEnd+10000; FreePort takes them from freePortsStart up. So
// the ports of a node killed and restarted by a test are never what
// FreePort hands another test (of any package) meanwhile: it once took a
// restarting node's bus port.
const (
	lowestTestPort     = 10000
	clusterPortsEnd    = 16000
	freePortsStart     = 26000
	firstEphemeralPort = 32768
)

// clusterNodePort picks a cluster node's port at random.
func clusterNodePort() int {
	return lowestTestPort + rand.IntN(clusterPortsEnd-lowestTestPort)
}

// freePortCandidate picks a port for FreePort at random.
func freePortCandidate() int {
	return freePortsStart + rand.IntN(firstEphemeralPort-freePortsStart)
}

// portFree reports whether a listener could take 127.0.0.1:port now.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// checkPID makes sure the server answering at s.Addr is s's process.
func (s *Server) checkPID() error {
	info, err := redis.String(s.do("INFO", "server"))
	if err != nil {
		return err
	}
	if got, want := infoValue(info, "process_id"), strconv.Itoa(s.cmd.Process.Pid); got != want {
		return fmt.Errorf("%s is served by process %s, not %s", s.Addr, got, want)
	}
	return nil
}

// infoValue finds "name:value" in the text INFO returns.
func infoValue(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// Do sends one command to the node on a new connection.
func (n *ClusterNode) Do(cmd string, args ...any) (any, error) { return n.do(cmd, args...) }

// Kill stops the node with SIGKILL.
func (n *ClusterNode) Kill() { n.Stop() }

// Running reports whether the node's process runs (it was not killed).
func (n *ClusterNode) Running() bool { return n.cmd != nil }

// Addrs returns every node's address, in start order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	return addrs
}

// Node returns the node at addr, or nil.
func (c *Cluster) Node(addr string) *ClusterNode {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// slotRange is one line of CLUSTER SLOTS: a range and its nodes.
type slotRange struct {
	start, end int
	primary    string
	replicas   []string
}

// slots asks node n for CLUSTER SLOTS, ranges sorted by start.
func (n *ClusterNode) slots() ([]slotRange, error) {
	reply, err := redis.Values(n.Do("CLUSTER", "SLOTS"))
	if err != nil {
		return nil, err
	}
	ranges := make([]slotRange, 0, len(reply))
	for _, r := range reply {
		entry, err := redis.Values(r, nil)
		if err != nil || len(entry) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS entry %v", r)
		}
		var sr slotRange
		sr.start, _ = redis.Int(entry[0], nil)
		sr.end, _ = redis.Int(entry[1], nil)
		for i, node := range entry[2:] {
			fields, err := redis.Values(node, nil)
			if err != nil || len(fields) < 2 {
				return nil, fmt.Errorf("CLUSTER SLOTS node %v", node)
			}
			host, _ := redis.String(fields[0], nil)
			port, _ := redis.Int(fields[1], nil)
			addr := net.JoinHostPort(host, strconv.Itoa(port))
			if i == 0 {
				sr.primary = addr
			} else {
				sr.replicas = append(sr.replicas, addr)
			}
		}
		ranges = append(ranges, sr)
	}
	slices.SortFunc(ranges, func(a, b slotRange) int { return a.start - b.start })
	return ranges, nil
}

// view returns the slot map of a running node, as ranges.
func (c *Cluster) view(t testing.TB) []slotRange {
	t.Helper()
	var lastErr error
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		ranges, err := n.slots()
		if err == nil {
			return ranges
		}
		lastErr = err
	}
	t.Fatalf("no running cluster node gave CLUSTER SLOTS: %v", lastErr)
	return nil
}

// Primaries returns the addresses of the primaries serving slots, as a
// running node sees them now, sorted.
func (c *Cluster) Primaries(t testing.TB) []string {
	t.Helper()
	var addrs []string
	for _, r := range c.view(t) {
		if !slices.Contains(addrs, r.primary) {
			addrs = append(addrs, r.primary)
		}
	}
	slices.Sort(addrs)
	return addrs
}

// SlotOwner returns the address of the primary serving slot, as a running
// node sees it now ("" when none does).
func (c *Cluster) SlotOwner(t testing.TB, slot int) string {
	t.Helper()
	for _, r := range c.view(t) {
		if r.start <= slot && slot <= r.end {
			return r.primary
		}
	}
	return ""
}

// WaitStateOK waits until every running node reports cluster_state:ok and
// the same slot map, every slot served by a running primary: after a
// failover or a migration, every node then routes alike.
func (c *Cluster) WaitStateOK(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		problem := c.stateProblem()
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 30s waiting for the cluster to settle: %s", problem)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stateProblem says why the cluster is not settled, or "".
func (c *Cluster) stateProblem() string {
	var first string
	var firstMap []slotRange
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		info, err := redis.String(n.Do("CLUSTER", "INFO"))
		if err != nil {
			return fmt.Sprintf("CLUSTER INFO at %s: %v", n.Addr, err)
		}
		if state := infoValue(info, "cluster_state"); state != "ok" {
			return fmt.Sprintf("%s reports cluster_state:%s", n.Addr, state)
		}
		ranges, err := n.slots()
		if err != nil {
			return fmt.Sprintf("CLUSTER SLOTS at %s: %v", n.Addr, err)
		}
		if firstMap == nil {
			first, firstMap = n.Addr, ranges
			covered := 0
			for _, r := range ranges {
				covered += r.end - r.start + 1
				if p := c.Node(r.primary); p == nil || !p.Running() {
					return fmt.Sprintf("slots %d-%d are served by %s, which is not running", r.start, r.end, r.primary)
				}
			}
			if covered != 16384 {
				return fmt.Sprintf("%s maps %d slots", n.Addr, covered)
			}
			continue
		}
		if !slices.EqualFunc(ranges, firstMap, func(a, b slotRange) bool {
			return a.start == b.start && a.end == b.end && a.primary == b.primary
		}) {
			return fmt.Sprintf("%s and %s disagree on the slot map", first, n.Addr)
		}
	}
	return ""
}

// WaitForReplicasUp waits until every running replica's link to its
// primary is up (master_link_status:up): before that, killing its primary
// would lose what the replica has not received, and the replica could not
// take over.
func (c *Cluster) WaitForReplicasUp(t testing.TB) {
	t.Helper()
	WaitFor(t, 30*time.Second, "every cluster replica's master_link_status:up", func() bool {
		for _, n := range c.Nodes {
			if !n.Running() {
				continue
			}
			info, err := redis.String(n.Do("INFO", "replication"))
			if err != nil {
				return false
			}
			if infoValue(info, "role") == "slave" && infoValue(info, "master_link_status") != "up" {
				return false
			}
		}
		return true
	})
}

// Migration moves one slot from its primary to another, in the phases of a
// live resharding, so that a test can run traffic in between: Start marks
// the slot migrating and importing (the source answers ASK for keys it no
// longer has, and TRYAGAIN for multi-key commands on keys split between the
// two), MoveKeys moves keys with MIGRATE, Finish gives the slot to the
// target on every primary (MOVED from then on).
type Migration struct {
	c              *Cluster
	slot           int
	source, target *ClusterNode
}

// StartMigration marks slot importing on the primary at toAddr and
// migrating on its current primary.
func (c *Cluster) StartMigration(t testing.TB, slot int, toAddr string) *Migration {
	t.Helper()
	from := c.SlotOwner(t, slot)
	m := &Migration{c: c, slot: slot, source: c.Node(from), target: c.Node(toAddr)}
	switch {
	case m.source == nil:
		t.Fatalf("migrate slot %d: its primary %q is not a node of the cluster", slot, from)
	case m.target == nil:
		t.Fatalf("migrate slot %d: %s is not a node of the cluster", slot, toAddr)
	case m.source == m.target:
		t.Fatalf("migrate slot %d: %s serves it already", slot, toAddr)
	}
	if _, err := m.target.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", m.source.ID); err != nil {
		t.Fatalf("CLUSTER SETSLOT %d IMPORTING at %s: %v", slot, m.target.Addr, err)
	}
	if _, err := m.source.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", m.target.ID); err != nil {
		t.Fatalf("CLUSTER SETSLOT %d MIGRATING at %s: %v", slot, m.source.Addr, err)
	}
	return m
}

// Source and Target return the addresses the slot moves from and to.
func (m *Migration) Source() string { return m.source.Addr }
func (m *Migration) Target() string { return m.target.Addr }

// MoveKeys migrates up to limit keys of the slot still on the source
// (limit <= 0: all of them), in MIGRATE batches of 100, and returns how
// many it moved.
func (m *Migration) MoveKeys(t testing.TB, limit int) int {
	t.Helper()
	host, port, _ := net.SplitHostPort(m.target.Addr)
	moved := 0
	for limit <= 0 || moved < limit {
		batch := 100
		if limit > 0 {
			batch = min(batch, limit-moved)
		}
		keys, err := redis.Strings(m.source.Do("CLUSTER", "GETKEYSINSLOT", m.slot, batch))
		if err != nil {
			t.Fatalf("CLUSTER GETKEYSINSLOT %d at %s: %v", m.slot, m.source.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		reply, err := m.source.Do("MIGRATE", args...)
		if err != nil {
			t.Fatalf("MIGRATE %d keys of slot %d to %s: %v", len(keys), m.slot, m.target.Addr, err)
		}
		if s, _ := redis.String(reply, nil); s == "NOKEY" {
			// The keys expired or were deleted between the two commands.
			continue
		}
		moved += len(keys)
	}
	return moved
}

// Finish moves the keys left and gives the slot to the target on every
// primary (the target first, then the source, as the Redis manual says),
// then waits until every node agrees.
func (m *Migration) Finish(t testing.TB) {
	t.Helper()
	m.MoveKeys(t, 0)
	order := []*ClusterNode{m.target, m.source}
	for _, addr := range m.c.Primaries(t) {
		if n := m.c.Node(addr); n != m.target && n != m.source {
			order = append(order, n)
		}
	}
	for _, n := range order {
		if _, err := n.Do("CLUSTER", "SETSLOT", m.slot, "NODE", m.target.ID); err != nil {
			t.Fatalf("CLUSTER SETSLOT %d NODE at %s: %v", m.slot, n.Addr, err)
		}
	}
	m.c.WaitStateOK(t)
}

// MigrateSlot moves slot, with its keys, to the primary at toAddr, in one
// go.
func (c *Cluster) MigrateSlot(t testing.TB, slot int, toAddr string) {
	t.Helper()
	c.StartMigration(t, slot, toAddr).Finish(t)
}

// LogTail returns the end of the node's log, for a failing test's report.
func (n *ClusterNode) LogTail() string {
	out, _ := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
	return string(out[max(0, len(out)-4000):])
}
