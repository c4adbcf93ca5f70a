package delayqueue

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// sharedCluster is the Redis Cluster every cluster variant of this
// package's tests runs on, started by the first of them.
var sharedCluster redistest.SharedCluster

func TestMain(m *testing.M) {
	code := m.Run()
	sharedCluster.Stop()
	os.Exit(code)
}

// testRedis is the Redis one test runs on: how the engine reaches it, and
// how the test reads its raw content.
type testRedis struct {
	// opts reach it: db 1 of one server, or the cluster's nodes (db 0).
	opts redisconn.Options
	// namespace starts the name of every key of the test's queues when
	// the Redis is shared with other tests (the shared cluster): their
	// KeyPrefix and BucketName start with it. "" on a server of the
	// test's own.
	namespace string
	// cluster is the cluster, nil on one server.
	cluster *redistest.Cluster
}

// newTestRedis is how the engine reaches r, a Redis from a redistest
// backend: db 1 of one server, or the cluster's nodes (db 0).
func newTestRedis(r *redistest.Redis) *testRedis {
	if r.Cluster == nil {
		return onServer(r.Addr)
	}
	c := onCluster(r.Cluster)
	c.namespace = r.Namespace
	return c
}

// onServer is the Redis server at addr, the test's own.
func onServer(addr string) *testRedis { return &testRedis{opts: testRedisOptions(addr)} }

// onCluster is the cluster c, the test's own.
func onCluster(c *redistest.Cluster) *testRedis {
	opts := testRedisOptions("")
	opts.DB = 0
	opts.ClusterAddrs = c.Addrs()
	return &testRedis{opts: opts, cluster: c}
}

func testRedisOptions(addr string) redisconn.Options {
	return redisconn.Options{Addr: addr, DB: 1, MaxIdle: 10, ConnectTimeout: time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 3 * time.Second}
}

// forEachBackend runs f on miniredis, on a real redis-server, and on the
// shared Redis Cluster of three primaries, in parallel (redistest.ForEach).
func forEachBackend(t *testing.T, f func(t *testing.T, r *testRedis)) {
	runOn(t, []redistest.Backend{redistest.MiniBackend(), redistest.ServerBackend(), sharedCluster.Backend()}, f)
}

// forEachRealBackend runs f on a real redis-server and on the shared
// cluster, for what miniredis does not do (WAIT).
func forEachRealBackend(t *testing.T, f func(t *testing.T, r *testRedis)) {
	runOn(t, []redistest.Backend{redistest.ServerBackend(), sharedCluster.Backend()}, f)
}

// forEachStandaloneBackend runs f on miniredis and on a real
// redis-server, for what never runs on a cluster: the migrations from
// layouts that never ran on one (Options.Cluster skips them).
func forEachStandaloneBackend(t *testing.T, f func(t *testing.T, r *testRedis)) {
	runOn(t, redistest.StandaloneBackends(), f)
}

func runOn(t *testing.T, backends []redistest.Backend, f func(t *testing.T, r *testRedis)) {
	t.Helper()
	redistest.ForEach(t, backends, func(t *testing.T, r *redistest.Redis) { f(t, newTestRedis(r)) })
}

// serverDenying starts a redis-server with an ACL user that has the
// server's documented permissions (redistest.SetACLUser) but command, and
// returns the server's address and the user's options.
func serverDenying(t *testing.T, command string) (string, redisconn.Options) {
	t.Helper()
	srv := redistest.Start(t)
	admin, err := redis.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	redistest.SetACLUser(t, admin.Do, "dq", "dq-secret", "-"+command)
	ro := testRedisOptions(srv.Addr)
	ro.Username, ro.Password = "dq", "dq-secret"
	return srv.Addr, ro
}

// client is a client of the backend, closed when the test ends.
func (r *testRedis) client(t *testing.T) *redisconn.Client {
	t.Helper()
	return newClient(t, r.opts, redistest.Logger(t))
}

// queueOptions are opts with the test's namespace put in front of the key
// names, so that on the shared cluster no test meets another's keys.
func (r *testRedis) queueOptions(opts Options) Options {
	if r.namespace == "" {
		return opts
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = defaults.KeyPrefix
	}
	opts.KeyPrefix = r.namespace + opts.KeyPrefix
	opts.BucketName = r.namespace + opts.BucketName
	return opts
}

// primaries are the addresses that hold the test's keys: the server, or
// every primary of the cluster.
func (r *testRedis) primaries(t *testing.T) []string {
	if r.cluster == nil {
		return []string{r.opts.Addr}
	}
	return r.cluster.Primaries(t)
}

// dialPrimary connects to one of primaries, to the database the engine
// uses there.
func (r *testRedis) dialPrimary(t *testing.T, addr string) redis.Conn {
	t.Helper()
	o := r.opts
	o.ClusterAddrs, o.Addr = nil, addr
	c, err := o.Dial()
	if err != nil {
		t.Fatalf("connect to %s: %v", addr, err)
	}
	return c
}

// keyPatterns are KEYS patterns that match every key of the test and, on
// a shared Redis, no other test's: its partitions' keys start with
// "{<namespace>", the others with the namespace.
func (r *testRedis) keyPatterns() []string {
	if r.namespace == "" {
		return []string{"*"}
	}
	return []string{r.namespace + "*", "{" + r.namespace + "*"}
}

// rawKeys lists the test's keys on each primary, by the primary's address.
func (r *testRedis) rawKeys(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, addr := range r.primaries(t) {
		func() {
			c := r.dialPrimary(t, addr)
			defer c.Close()
			out[addr] = r.keysOn(t, c)
		}()
	}
	return out
}

// keysOn lists the test's keys that the server of c holds.
func (r *testRedis) keysOn(t *testing.T, c redis.Conn) []string {
	t.Helper()
	var keys []string
	for _, pattern := range r.keyPatterns() {
		found, err := redis.Strings(c.Do("KEYS", pattern))
		if err != nil {
			t.Fatalf("KEYS %s: %v", pattern, err)
		}
		keys = append(keys, found...)
	}
	return keys
}

// assertNoTraces checks that nothing of the test in Redis names any of
// needles (a topic, a job id) any more: no key, hash field or value, set
// or sorted-set member, or list element.
func assertNoTraces(t *testing.T, r *testRedis, needles ...string) {
	t.Helper()
	if found := traces(t, r, needles...); len(found) > 0 {
		t.Fatalf("still in Redis:\n%s", strings.Join(found, "\n"))
	}
}

// traces lists what in the test's keys, on every primary, names one of
// needles.
func traces(t *testing.T, r *testRedis, needles ...string) []string {
	t.Helper()
	var found []string
	for _, tr := range keysNaming(t, r, needles...) {
		found = append(found, tr.what)
	}
	return found
}

// trace is one key of a test that names a needle.
type trace struct {
	key, primary string
	// what says where the key names it, for a failure's report.
	what string
}

// keysNaming lists the test's keys, on every primary, whose name or
// content names one of needles.
func keysNaming(t *testing.T, r *testRedis, needles ...string) []trace {
	t.Helper()
	return naming(rawContent(t, r), needles...)
}

// naming lists which of keys name one of needles, in their name or their
// content.
func naming(keys []rawKey, needles ...string) []trace {
	names := func(s string) bool {
		for _, n := range needles {
			if strings.Contains(s, n) {
				return true
			}
		}
		return false
	}
	var found []trace
	for _, k := range keys {
		if names(k.key) {
			found = append(found, trace{key: k.key, primary: k.primary, what: "key " + k.key})
			continue
		}
		for _, item := range k.items {
			if names(item) {
				found = append(found, trace{key: k.key, primary: k.primary, what: fmt.Sprintf("%s %s: %q", k.typ, k.key, item)})
			}
		}
	}
	return found
}

// rawKey is one key of a test and what it holds: a hash's fields and
// values, a set's or sorted set's members, a list's elements, a string.
type rawKey struct {
	key, primary, typ string
	items             []string
}

// rawContent reads every key of the test, on every primary.
func rawContent(t *testing.T, r *testRedis) []rawKey {
	t.Helper()
	var out []rawKey
	for _, addr := range r.primaries(t) {
		func() {
			c := r.dialPrimary(t, addr)
			defer c.Close()
			for _, k := range r.keysOn(t, c) {
				out = append(out, readKey(t, c, addr, k))
			}
		}()
	}
	return out
}

// readKey reads key k on the server of c, at addr.
func readKey(t *testing.T, c redis.Conn, addr, k string) rawKey {
	t.Helper()
	typ, err := redis.String(c.Do("TYPE", k))
	if err != nil {
		t.Fatalf("TYPE %s: %v", k, err)
	}
	var items []string
	switch typ {
	case "hash":
		items, err = redis.Strings(c.Do("HGETALL", k))
	case "zset":
		items, err = redis.Strings(c.Do("ZRANGE", k, 0, -1))
	case "set":
		items, err = redis.Strings(c.Do("SMEMBERS", k))
	case "list":
		items, err = redis.Strings(c.Do("LRANGE", k, 0, -1))
	case "string":
		var v string
		v, err = redis.String(c.Do("GET", k))
		items = []string{v}
	}
	// A key may go between KEYS and its read (a wake-up list taken).
	if err != nil && !errors.Is(err, redis.ErrNil) {
		t.Fatalf("read %s %s: %v", typ, k, err)
	}
	return rawKey{key: k, primary: addr, typ: typ, items: items}
}
