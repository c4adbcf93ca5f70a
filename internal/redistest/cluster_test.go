package redistest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
)

// keySlot asks the cluster for key's slot.
func keySlot(t *testing.T, n *ClusterNode, key string) int {
	t.Helper()
	slot, err := redis.Int(n.Do("CLUSTER", "KEYSLOT", key))
	if err != nil {
		t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
	}
	return slot
}

// nodeDo sends one command to the node at addr, ASKING first when asking.
func nodeDo(t *testing.T, addr string, asking bool, cmd string, args ...any) (any, error) {
	t.Helper()
	c, err := redis.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	if asking {
		if _, err := c.Do("ASKING"); err != nil {
			t.Fatalf("ASKING at %s: %v", addr, err)
		}
	}
	return c.Do(cmd, args...)
}

// wantReply checks that err is an error reply starting with prefix.
func wantReply(t *testing.T, what string, err error, prefix string) {
	t.Helper()
	var reply redis.Error
	if !errors.As(err, &reply) || !strings.HasPrefix(string(reply), prefix) {
		t.Fatalf("%s: got %v, want a %s reply", what, err, prefix)
	}
}

func TestClusterRoutesAndMigrates(t *testing.T) {
	c := StartCluster(t, 3, 0)
	primaries := c.Primaries(t)
	if want := c.Addrs(); !slices.Equal(primaries, slices.Sorted(slices.Values(want))) {
		t.Fatalf("Primaries = %v, want the three nodes %v", primaries, want)
	}

	// One key on each primary: its owner takes it, another answers MOVED.
	owners := map[string]string{}
	for i := 0; len(owners) < 3 && i < 100; i++ {
		key := "key" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		owner := c.SlotOwner(t, keySlot(t, c.Nodes[0], key))
		if _, taken := owners[owner]; !taken {
			owners[owner] = key
		}
	}
	if len(owners) != 3 {
		t.Fatalf("keys found on %d primaries, want 3: %v", len(owners), owners)
	}
	for owner, key := range owners {
		if _, err := nodeDo(t, owner, false, "SET", key, "v"); err != nil {
			t.Fatalf("SET %s at its owner %s: %v", key, owner, err)
		}
		for _, other := range primaries {
			if other != owner {
				_, err := nodeDo(t, other, false, "GET", key)
				wantReply(t, "GET "+key+" at "+other, err, "MOVED")
			}
		}
	}

	// A migration in phases: a moved key is answered ASK by the source and
	// served by the target after ASKING; a key still on the source is
	// served there.
	const k1, k2 = "{mig}one", "{mig}two"
	slot := keySlot(t, c.Nodes[0], k1)
	from := c.SlotOwner(t, slot)
	to := primaries[0]
	if to == from {
		to = primaries[1]
	}
	for _, k := range []string{k1, k2} {
		if _, err := nodeDo(t, from, false, "SET", k, k); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
	}
	m := c.StartMigration(t, slot, to)
	if m.Source() != from || m.Target() != to {
		t.Fatalf("migration from %s to %s, want from %s to %s", m.Source(), m.Target(), from, to)
	}
	if moved := m.MoveKeys(t, 1); moved != 1 {
		t.Fatalf("MoveKeys(1) moved %d keys", moved)
	}
	onTarget, err := redis.Strings(nodeDo(t, to, true, "MGET", k1, k2))
	if err == nil {
		t.Fatalf("MGET of both keys at the target answered %q, want TRYAGAIN (one key is still on the source)", onTarget)
	}
	wantReply(t, "MGET of keys split between the nodes", err, "TRYAGAIN")
	movedKey, keptKey := k1, k2
	if _, err := nodeDo(t, from, false, "GET", k1); err == nil {
		movedKey, keptKey = k2, k1
	}
	_, err = nodeDo(t, from, false, "GET", movedKey)
	wantReply(t, "GET of the moved key at the source", err, "ASK")
	if v, err := redis.String(nodeDo(t, to, true, "GET", movedKey)); err != nil || v != movedKey {
		t.Fatalf("ASKING GET %s at the target = %q, %v", movedKey, v, err)
	}
	if v, err := redis.String(nodeDo(t, from, false, "GET", keptKey)); err != nil || v != keptKey {
		t.Fatalf("GET %s at the source = %q, %v", keptKey, v, err)
	}

	m.Finish(t)
	if owner := c.SlotOwner(t, slot); owner != to {
		t.Fatalf("after the migration slot %d is served by %s, want %s", slot, owner, to)
	}
	for _, k := range []string{k1, k2} {
		if v, err := redis.String(nodeDo(t, to, false, "GET", k)); err != nil || v != k {
			t.Fatalf("GET %s at the new owner = %q, %v", k, v, err)
		}
		_, err := nodeDo(t, from, false, "GET", k)
		wantReply(t, "GET "+k+" at the old owner", err, "MOVED")
	}

	// MigrateSlot does it in one go, back.
	c.MigrateSlot(t, slot, from)
	if owner := c.SlotOwner(t, slot); owner != from {
		t.Fatalf("after migrating back slot %d is served by %s, want %s", slot, owner, from)
	}
	if v, err := redis.String(nodeDo(t, from, false, "GET", k1)); err != nil || v != k1 {
		t.Fatalf("GET %s after migrating back = %q, %v", k1, v, err)
	}
}

// A killed primary's replica takes over; the killed node, restarted,
// rejoins as a replica.
func TestClusterFailoverAndRejoin(t *testing.T) {
	c := StartCluster(t, 3, 1)
	primaries := c.Primaries(t)
	if len(primaries) != 3 || len(c.Nodes) != 6 {
		t.Fatalf("%d nodes with primaries %v, want 6 nodes and 3 primaries", len(c.Nodes), primaries)
	}
	victim := c.Node(primaries[0])
	victim.Kill()
	c.WaitStateOK(t)
	after := c.Primaries(t)
	if slices.Contains(after, victim.Addr) || len(after) != 3 {
		t.Fatalf("after the kill the primaries are %v; want three, without %s", after, victim.Addr)
	}
	victim.Restart(t)
	c.WaitStateOK(t)
	c.WaitForReplicasUp(t)
	info, err := redis.String(victim.Do("INFO", "replication"))
	if err != nil || !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
		t.Fatalf("the restarted node's replication: %q, %v; want a replica with its link up", info, err)
	}
}
