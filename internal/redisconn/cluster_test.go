package redisconn

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// set runs SET key value through c.Do.
func set(t *testing.T, c *Client, key, value string) {
	t.Helper()
	err := c.Do(context.Background(), key, func(conn redis.Conn) error {
		_, err := conn.Do("SET", key, value)
		return err
	})
	if err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
}

// portOf returns the port of the server on conn (INFO server).
func portOf(t *testing.T, conn redis.Conn) string {
	t.Helper()
	info, err := redis.String(conn.Do("INFO", "server"))
	if err != nil {
		t.Fatalf("INFO server: %v", err)
	}
	return infoField(info, "tcp_port")
}

func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// One cluster of 3 primaries, for subtests that run one after another:
// the later ones move slots.
func TestCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	dead := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	c, obs := newTestClient(t, dead, cluster.Addrs()[0])
	ctx := context.Background()

	t.Run("Slot agrees with CLUSTER KEYSLOT", func(t *testing.T) {
		node := cluster.Nodes[0]
		for i := range 300 {
			key := fmt.Sprintf("key:%d", i)
			switch i % 3 {
			case 1:
				key = fmt.Sprintf("dq_{dq_bucket_%d}:job:%d", i, i)
			case 2:
				key = fmt.Sprintf("{}x{%d}", i)
			}
			want, err := redis.Int(node.Do("CLUSTER", "KEYSLOT", key))
			if err != nil {
				t.Fatalf("CLUSTER KEYSLOT: %v", err)
			}
			if got := Slot(key); got != want {
				t.Errorf("Slot(%q) = %d, Redis says %d", key, got, want)
			}
		}
	})

	t.Run("keys of every slot go to their primary", func(t *testing.T) {
		holders := map[string]int{}
		for i := range 60 {
			key := fmt.Sprintf("route:%d", i)
			set(t, c, key, key)
			owner := cluster.SlotOwner(t, Slot(key))
			holders[owner]++
			if v, err := redis.String(cluster.Node(owner).Do("GET", key)); err != nil || v != key {
				t.Fatalf("GET %s at its primary %s = %q, %v", key, owner, v, err)
			}
		}
		if len(holders) != 3 {
			t.Fatalf("the keys landed on %d primaries, want 3: %v", len(holders), holders)
		}
		script := redis.NewScript(2, "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('MGET', KEYS[1], KEYS[2])")
		var got []string
		err := c.Do(ctx, "{tag}a", func(conn redis.Conn) error {
			var err error
			got, err = redis.Strings(script.Do(conn, "{tag}a", "{tag}b", "va"))
			return err
		})
		if err != nil || !slices.Equal(got, []string{"va", ""}) {
			t.Fatalf("script = %q, %v", got, err)
		}
		if n := obs.redirected(RedirectMoved) + obs.redirected(RedirectAsk); n != 0 {
			t.Errorf("%d redirects with a settled map, want none", n)
		}

		primaries, err := c.Primaries(ctx)
		if err != nil || !slices.Equal(primaries, cluster.Primaries(t)) {
			t.Fatalf("Primaries = %v, %v; want %v", primaries, err, cluster.Primaries(t))
		}
		for _, addr := range primaries {
			err := c.doAt(ctx, addr, func(conn redis.Conn) error {
				if got := portOf(t, conn); got != port(addr) {
					t.Errorf("doAt(%s) ran on port %s", addr, got)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("doAt(%s): %v", addr, err)
			}
		}
		if err := c.CheckServers(ctx); err != nil {
			t.Fatalf("CheckServers: %v", err)
		}
		if s := c.Stats(); s.ActiveCount < 3 || s.IdleCount != s.ActiveCount {
			t.Errorf("Stats = %+v, want idle connections to each of the 3 primaries, none in use", s)
		}
	})

	t.Run("the credentials apply to every node", func(t *testing.T) {
		// The ACL rules docs/operations.md gives, with CLUSTER SLOTS for
		// the map; ACL users are per node, so each gets them.
		for _, n := range cluster.Nodes {
			redistest.SetACLUser(t, n.Do, "dq", "secret", "+cluster|slots")
			redistest.SetACLUser(t, n.Do, "nomap", "secret")
		}
		opts := clusterOptions(cluster.Addrs()[0])
		opts.Username, opts.Password = "dq", "secret"
		withUser, err := New(opts, redistest.Logger(t), nil)
		if err != nil {
			t.Fatalf("New with the ACL user: %v", err)
		}
		defer withUser.Close()
		owners := map[string]bool{}
		for i := range 30 {
			key := fmt.Sprintf("acl:%d", i)
			set(t, withUser, key, key)
			if v, err := get(withUser, key); err != nil || v != key {
				t.Fatalf("GET %s as the ACL user = %q, %v", key, v, err)
			}
			owners[cluster.SlotOwner(t, Slot(key))] = true
		}
		if len(owners) != 3 {
			t.Fatalf("the keys reached %d primaries, want 3", len(owners))
		}
		opts.Username = "nomap"
		if c, err := New(opts, nil, nil); err == nil {
			c.Close()
			t.Fatal("New with a user that may not run CLUSTER SLOTS succeeded")
		} else if !strings.Contains(err.Error(), "cluster|slots") {
			t.Errorf("New with a user that may not run CLUSTER SLOTS: %v; want the missing permission named", err)
		}
		opts.Username, opts.Password = "dq", "wrong"
		if c, err := New(opts, nil, nil); err == nil {
			c.Close()
			t.Fatal("New with a wrong password succeeded")
		}
	})

	t.Run("a live migration answers ASK, TRYAGAIN, then MOVED", func(t *testing.T) {
		keys := []string{"{mig}one", "{mig}two"}
		for _, k := range keys {
			set(t, c, k, k)
		}
		slot := Slot(keys[0])
		from := cluster.SlotOwner(t, slot)
		to := cluster.Primaries(t)[0]
		if to == from {
			to = cluster.Primaries(t)[1]
		}
		m := cluster.StartMigration(t, slot, to)
		m.MoveKeys(t, 1)
		moved, kept := keys[0], keys[1]
		if _, err := cluster.Node(from).Do("GET", moved); err == nil {
			moved, kept = kept, moved
		}

		asks := obs.redirected(RedirectAsk)
		if v, err := get(c, moved); err != nil || v != moved {
			t.Fatalf("GET of the migrated key = %q, %v", v, err)
		}
		if obs.redirected(RedirectAsk) != asks+1 {
			t.Errorf("ask redirects went from %d to %d, want one more", asks, obs.redirected(RedirectAsk))
		}
		if v, err := get(c, kept); err != nil || v != kept {
			t.Fatalf("GET of the key still on the source = %q, %v", v, err)
		}

		// Keys split between the nodes: TRYAGAIN, until the rest moves
		// (done by the hook, before the client retries), then ASK.
		obs.mu.Lock()
		obs.onRedirect = func(kind string) {
			if kind == RedirectTryAgain {
				obs.mu.Lock()
				obs.onRedirect = nil
				obs.mu.Unlock()
				m.MoveKeys(t, 0)
			}
		}
		obs.mu.Unlock()
		tries, asks := obs.redirected(RedirectTryAgain), obs.redirected(RedirectAsk)
		var both []string
		err := c.Do(ctx, keys[0], func(conn redis.Conn) error {
			var err error
			both, err = redis.Strings(conn.Do("MGET", keys[0], keys[1]))
			return err
		})
		if err != nil || !slices.Equal(both, keys) {
			t.Fatalf("MGET during the migration = %q, %v", both, err)
		}
		if obs.redirected(RedirectTryAgain) <= tries || obs.redirected(RedirectAsk) <= asks {
			t.Errorf("tryagain %d -> %d, ask %d -> %d: want both met", tries, obs.redirected(RedirectTryAgain),
				asks, obs.redirected(RedirectAsk))
		}

		// A BLPOP on an empty list of the migrating slot is answered ASK at
		// once (Client.Dial's doc tells callers to pause then).
		blocking, err := c.Dial(ctx, "{mig}wake")
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		_, err = blocking.Do("BLPOP", "{mig}wake", 5)
		blocking.Close()
		if RedirectKind(err) != RedirectAsk {
			t.Fatalf("BLPOP during the migration = %v, want an ASK", err)
		}

		m.Finish(t)
		moves := obs.redirected(RedirectMoved)
		for range 2 {
			if v, err := get(c, keys[0]); err != nil || v != keys[0] {
				t.Fatalf("GET after the migration = %q, %v", v, err)
			}
		}
		if obs.redirected(RedirectMoved) != moves+1 {
			t.Errorf("moved redirects went from %d to %d, want one more: the second GET goes to the new owner directly",
				moves, obs.redirected(RedirectMoved))
		}
	})

	t.Run("a BLPOP whose slot moves is unblocked, and Dial follows", func(t *testing.T) {
		const key = "{blocking}wake"
		slot := Slot(key)
		from := cluster.SlotOwner(t, slot)
		to := cluster.Primaries(t)[0]
		if to == from {
			to = cluster.Primaries(t)[1]
		}
		conn, err := c.Dial(ctx, key)
		if err != nil {
			t.Fatalf("Dial: %v", err)
		}
		if got := portOf(t, conn); got != port(from) {
			t.Fatalf("Dial connected to port %s, want the owner's %s", got, port(from))
		}
		unblocked := make(chan error, 1)
		go func() {
			_, err := conn.Do("BLPOP", key, 20)
			unblocked <- err
		}()
		redistest.WaitFor(t, 5*time.Second, "the BLPOP to block", func() bool {
			info, err := redis.String(cluster.Node(from).Do("INFO", "clients"))
			return err == nil && infoField(info, "blocked_clients") == "1"
		})
		cluster.MigrateSlot(t, slot, to)
		select {
		case err := <-unblocked:
			if !isRedirect(err) {
				t.Fatalf("BLPOP ended with %v, want a redirect", err)
			}
			t.Logf("BLPOP unblocked with %v", err)
		case <-time.After(15 * time.Second):
			t.Fatal("the BLPOP was not unblocked within 15 s of its slot moving")
		}
		conn.Close()
		conn, err = c.Dial(ctx, key)
		if err != nil {
			t.Fatalf("Dial again: %v", err)
		}
		defer conn.Close()
		if got := portOf(t, conn); got != port(to) {
			t.Fatalf("Dial after the move connected to port %s, want the new owner's %s", got, port(to))
		}
	})
}

// A primary killed under a client: its replica takes over, and the client
// finds it by itself once the map is fetched again.
func TestClusterFailover(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 1)
	c, obs := newTestClient(t, cluster.Addrs()...)
	ctx := context.Background()

	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("failover:%d", i)
		err := c.Do(ctx, keys[i], func(conn redis.Conn) error {
			if _, err := conn.Do("SET", keys[i], keys[i]); err != nil {
				return err
			}
			// The replica has it before the kill.
			n, err := redis.Int(conn.Do("WAIT", 1, 2000))
			if err == nil && n < 1 {
				err = fmt.Errorf("WAIT: %d replicas", n)
			}
			return err
		})
		if err != nil {
			t.Fatalf("SET %s: %v", keys[i], err)
		}
	}
	victim := cluster.Node(cluster.SlotOwner(t, Slot(keys[0])))
	refreshes := obs.refreshed(true)
	victim.Kill()
	killed := time.Now()

	failures := 0
	redistest.WaitFor(t, 30*time.Second, "GET of a key of the killed primary to succeed", func() bool {
		v, err := get(c, keys[0])
		if err != nil {
			failures++
			return false
		}
		if v != keys[0] {
			t.Fatalf("GET %s = %q after the failover", keys[0], v)
		}
		return true
	})
	t.Logf("calls to the failed shard succeeded again %v after the kill, after %d failed calls, %d map fetches",
		time.Since(killed).Round(time.Millisecond), failures, obs.refreshed(true)-refreshes)
	for _, k := range keys {
		if v, err := get(c, k); err != nil || v != k {
			t.Fatalf("GET %s after the failover = %q, %v", k, v, err)
		}
	}
	if obs.refreshed(true) <= refreshes {
		t.Error("the map was not fetched after the kill")
	}
	primaries, err := c.Primaries(ctx)
	if err != nil || len(primaries) != 3 || slices.Contains(primaries, victim.Addr) {
		t.Fatalf("Primaries = %v, %v; want 3 without the killed %s", primaries, err, victim.Addr)
	}
	redistest.WaitFor(t, 5*time.Second, "the killed primary's pool to be closed", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.pools[victim.Addr] == nil
	})
	conn, err := c.Dial(ctx, keys[0])
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if got, want := portOf(t, conn), port(cluster.SlotOwner(t, Slot(keys[0]))); got != want {
		t.Errorf("Dial connected to port %s, want the promoted replica's %s", got, want)
	}
	conn.Close()

	// The killed node comes back as a replica; nothing changes for the
	// client.
	victim.Restart(t)
	cluster.WaitStateOK(t)
	cluster.WaitForReplicasUp(t)
	if v, err := get(c, keys[0]); err != nil || v != keys[0] {
		t.Fatalf("GET after the old primary rejoined = %q, %v", v, err)
	}
}

// With TLS, every node's certificate is checked against redis.tls_server_name
// when set, else against the host the cluster announces for the node.
func TestClusterTLS(t *testing.T) {
	files := redistest.WriteTLSFiles(t, "redis.test")
	cluster := redistest.StartClusterTLS(t, files, 3, 0)
	for _, tt := range []struct {
		name       string
		tls        bool
		serverName string
		wantErr    string
	}{
		{"name from each node's address (IP SAN)", true, "", ""},
		{"one server name for every node", true, "redis.test", ""},
		{"a name the certificates do not carry", true, "other.test", "certificate"},
		{"plain text to TLS ports", false, "", "no cluster node gave the slot map"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			opts := clusterOptions(cluster.Addrs()[0])
			if tt.tls {
				cfg, err := NewTLSConfig(files.CAFile, tt.serverName)
				if err != nil {
					t.Fatal(err)
				}
				opts.TLS, opts.TLSConfig = true, cfg
			}
			c, err := New(opts, redistest.Logger(t), nil)
			if !opened(t, "New", c, err, tt.wantErr) {
				return
			}
			defer c.Close()
			owners := map[string]bool{}
			for i := range 30 {
				key := fmt.Sprintf("tls:%d", i)
				set(t, c, key, key)
				if v, err := get(c, key); err != nil || v != key {
					t.Fatalf("GET %s = %q, %v", key, v, err)
				}
				owners[cluster.SlotOwner(t, Slot(key))] = true
			}
			if len(owners) != 3 {
				t.Fatalf("the keys reached %d primaries, want 3", len(owners))
			}
		})
	}
}
