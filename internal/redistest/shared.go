package redistest

import (
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
)

// SharedCluster is a Redis Cluster of three primaries without replicas
// that the tests of one test binary share. Starting a cluster takes a
// second or more, too long to pay in every test of a suite that runs each
// test on it, so it starts on the first Get and stops when the binary's
// TestMain calls Stop:
//
//	var sharedCluster redistest.SharedCluster
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		sharedCluster.Stop()
//		os.Exit(code)
//	}
//
// Tests that share it must leave its nodes alone (no kill, restart,
// migration, FLUSHALL or CONFIG SET: a test that needs those starts a
// cluster of its own with StartCluster) and keep to key names of their
// own: each takes a Namespace and starts every key name with it.
type SharedCluster struct {
	mu      sync.Mutex
	cluster *Cluster
	// failure says why a start failed; later callers fail with it rather
	// than start nodes again.
	failure string
	scope   *sharedScope
	// namespaces counts the names Namespace handed out.
	namespaces atomic.Int64
}

// sharedCluster* are the shared cluster's size.
const (
	sharedClusterPrimaries = 3
	sharedClusterReplicas  = 0
)

// Get returns the shared cluster, started by the first call, which waits
// for cluster_state:ok on every node. Like StartCluster it skips the test
// (fails it with DQ_REQUIRE_REDIS=1) when redis-server or redis-cli is
// missing.
func (s *SharedCluster) Get(t testing.TB) *Cluster {
	t.Helper()
	Binary(t, "redis-server")
	Binary(t, "redis-cli")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cluster != nil {
		return s.cluster
	}
	if s.failure != "" {
		t.Fatalf("the shared Redis Cluster could not start: %s", s.failure)
	}
	// A failed start ends the starting test (Fatalf) without returning:
	// the failure then stays recorded, and the nodes started so far are in
	// the scope, for Stop.
	s.failure = "it failed in " + t.Name() + ", see that test's log"
	dir, err := os.MkdirTemp("", "dq-shared-cluster-")
	if err != nil {
		t.Fatalf("shared cluster directory: %v", err)
	}
	s.scope = &sharedScope{TB: t, dir: dir}
	s.cluster = startCluster(s.scope, nil, sharedClusterPrimaries, sharedClusterReplicas, nil)
	s.failure = ""
	return s.cluster
}

// Namespace returns a name that no other call on s returns, such as
// "t7_", to start a test's key names with on the shared cluster: made of
// letters, digits and "_", it needs no escaping in a KEYS pattern, and
// the names of two calls are never prefixes of each other.
func (s *SharedCluster) Namespace() string {
	return "t" + strconv.FormatInt(s.namespaces.Add(1), 10) + "_"
}

// Stop stops the shared cluster's nodes and removes their directories; it
// does nothing when no test started it. TestMain calls it once the tests
// have run.
func (s *SharedCluster) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scope == nil {
		return
	}
	for _, stop := range slices.Backward(s.scope.cleanups) {
		stop()
	}
	_ = os.RemoveAll(s.scope.dir)
	s.scope, s.cluster = nil, nil
	s.failure = "it was stopped"
}

// sharedScope is the test that starts the shared cluster, except that the
// nodes it starts outlive it: their directories are made under dir and
// their stops kept for SharedCluster.Stop, instead of going with the test.
// Failures while starting are still that test's.
type sharedScope struct {
	testing.TB
	dir      string
	cleanups []func()
}

func (s *sharedScope) TempDir() string {
	dir, err := os.MkdirTemp(s.dir, "node-")
	if err != nil {
		s.Fatalf("shared cluster node directory: %v", err)
	}
	return dir
}

func (s *sharedScope) Cleanup(f func()) { s.cleanups = append(s.cleanups, f) }
