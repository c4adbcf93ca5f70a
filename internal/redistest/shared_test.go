package redistest

import (
	"strings"
	"testing"
)

// The shared cluster is started once, outlives the test that started it,
// hands out namespaces that are never prefixes of each other, and stops
// with Stop.
func TestSharedClusterOutlivesTheTestThatStartedIt(t *testing.T) {
	var shared SharedCluster
	defer shared.Stop()
	var first *Cluster
	t.Run("first", func(t *testing.T) { first = shared.Get(t) })
	if t.Failed() {
		t.FailNow()
	}
	t.Run("second", func(t *testing.T) {
		if c := shared.Get(t); c != first {
			t.Fatal("a second Get started another cluster")
		}
		if got := len(first.Primaries(t)); got != sharedClusterPrimaries {
			t.Fatalf("%d primaries, want %d", got, sharedClusterPrimaries)
		}
		for _, n := range first.Nodes {
			if _, err := n.Do("PING"); err != nil {
				t.Fatalf("node %s after the first test ended: %v", n.Addr, err)
			}
		}
		first.WaitStateOK(t)
	})

	seen := map[string]bool{}
	for range 120 {
		ns := shared.Namespace()
		for other := range seen {
			if strings.HasPrefix(ns, other) || strings.HasPrefix(other, ns) {
				t.Fatalf("namespaces %q and %q: one starts the other", ns, other)
			}
		}
		seen[ns] = true
	}

	shared.Stop()
	for _, n := range first.Nodes {
		if n.Running() {
			t.Errorf("node %s still running after Stop", n.Addr)
		}
		if _, err := n.Do("PING"); err == nil {
			t.Errorf("node %s still answers after Stop", n.Addr)
		}
	}
}
