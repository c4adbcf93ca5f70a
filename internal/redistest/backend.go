package redistest

import "testing"

// Backend is one kind of Redis that tests run on: miniredis, a real
// redis-server, or a Redis Cluster. Tests that must hold on each run once
// per backend, in subtests named after it (ForEach).
type Backend struct {
	// Name names the subtests that run on the backend.
	Name string
	// start gives one test a Redis of this kind, stopped when it ends.
	start func(t testing.TB) *Redis
}

// Redis is the Redis that one test got from a Backend.
type Redis struct {
	// Addr is the server's address; "" on a cluster.
	Addr string
	// Cluster is the cluster; nil on one server.
	Cluster *Cluster
	// Namespace starts the name of every key of the test when the Redis is
	// shared with other tests (the shared cluster, see
	// SharedCluster.Namespace); "" on a Redis of the test's own, where any
	// name goes.
	Namespace string
	// Stop stops the Redis before the test ends, for tests of what
	// happens then; nil where no test may (the shared cluster).
	Stop func()
}

// Start gives the test a Redis of the backend's kind. Like the functions
// it calls (Mini, Start, SharedCluster.Get), it skips the test when a
// binary it needs is missing, unless DQ_REQUIRE_REDIS=1.
func (b Backend) Start(t testing.TB) *Redis {
	t.Helper()
	return b.start(t)
}

// MiniBackend is an in-process miniredis of the test's own.
func MiniBackend() Backend {
	return Backend{Name: "miniredis", start: func(t testing.TB) *Redis {
		m := Mini(t)
		return &Redis{Addr: m.Addr(), Stop: m.Close}
	}}
}

// ServerBackend is a redis-server of the test's own (Start).
func ServerBackend() Backend {
	return Backend{Name: "redis", start: func(t testing.TB) *Redis {
		s := Start(t)
		return &Redis{Addr: s.Addr, Stop: s.Stop}
	}}
}

// Backend is the shared cluster s, with a namespace of its own for each
// test.
func (s *SharedCluster) Backend() Backend {
	return Backend{Name: "cluster", start: func(t testing.TB) *Redis {
		return &Redis{Cluster: s.Get(t), Namespace: s.Namespace()}
	}}
}

// StandaloneBackends are miniredis and a real redis-server.
func StandaloneBackends() []Backend { return []Backend{MiniBackend(), ServerBackend()} }

// ForEach runs f once per backend, each in a subtest named after the
// backend, on a Redis that the backend starts for that subtest. The
// subtests run in parallel with each other (and with the other parallel
// tests): none sees another's keys, since each has a Redis or, on the
// shared cluster, a namespace of its own.
func ForEach(t *testing.T, backends []Backend, f func(t *testing.T, r *Redis)) {
	t.Helper()
	for _, b := range backends {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			f(t, b.Start(t))
		})
	}
}
