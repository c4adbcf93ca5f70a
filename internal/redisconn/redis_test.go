package redisconn

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// connectivityOptions are Options with the test timeouts and no address:
// each test says how to reach its server.
func connectivityOptions() Options {
	return Options{DB: 1, MaxIdle: 10, ConnectTimeout: time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 3 * time.Second}
}

// exerciseConnections runs a command, a script and a blocking pop through
// a pool built from o and through a connection from o.Dial, so that every
// kind of call the engine makes passes through o's connections.
func exerciseConnections(t *testing.T, o Options) {
	t.Helper()
	pool := NewPool(o)
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := CheckServer(ctx, pool); err != nil {
		t.Fatalf("CheckServer: %v", err)
	}
	c, err := pool.GetContext(ctx)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	defer c.Close()
	if _, err := c.Do("DEL", "conn:list"); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	got, err := redis.String(redis.NewScript(1, "redis.call('SET', KEYS[1], ARGV[1]) return redis.call('GET', KEYS[1])").Do(c, "conn:k", "v"))
	if err != nil || got != "v" {
		t.Fatalf("script = %q, %v; want v", got, err)
	}

	blocking, err := o.Dial()
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer blocking.Close()
	popped := make(chan []string, 1)
	go func() {
		reply, err := redis.Strings(blocking.Do("BLPOP", "conn:list", 5))
		if err != nil {
			t.Errorf("BLPOP: %v", err)
		}
		popped <- reply
	}()
	redistest.WaitFor(t, 5*time.Second, "the BLPOP to block", func() bool {
		info, err := redis.String(c.Do("INFO", "clients"))
		return err == nil && infoField(info, "blocked_clients") == "1"
	})
	if _, err := c.Do("RPUSH", "conn:list", "x"); err != nil {
		t.Fatalf("RPUSH: %v", err)
	}
	if reply := <-popped; len(reply) != 2 || reply[1] != "x" {
		t.Fatalf("BLPOP = %q, want [conn:list x]", reply)
	}
}

func TestDialACLUser(t *testing.T) {
	srv := redistest.Start(t)
	admin, err := redis.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	// The permissions docs/operations.md lists for the server's ACL user;
	// ROLE is only needed with Sentinel. (delayqueue's tests check that the
	// engine needs no more.)
	redistest.SetACLUser(t, admin.Do, "dq", "dq-secret")

	tests := []struct {
		name     string
		username string
		password string
		wantErr  string // empty: the dial works
	}{
		{"acl user", "dq", "dq-secret", ""},
		{"wrong password", "dq", "nope", "WRONGPASS"},
		{"unknown user", "nobody", "dq-secret", "WRONGPASS"},
		{"password without a user goes to the default user", "", "dq-secret", "AUTH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ro := connectivityOptions()
			ro.Addr, ro.Username, ro.Password = srv.Addr, tt.username, tt.password
			c, err := ro.Dial()
			if !opened(t, "Dial", c, err, tt.wantErr) {
				return
			}
			defer c.Close()
			who, err := redis.String(c.Do("ACL", "WHOAMI"))
			if err == nil {
				t.Fatalf("ACL WHOAMI = %q: the test user must not have admin commands", who)
			}
			exerciseConnections(t, ro)
		})
	}
}

func TestDialTLS(t *testing.T) {
	files := redistest.WriteTLSFiles(t, "redis.test")
	srv := redistest.StartTLS(t, files)
	otherCA := redistest.WriteTLSFiles(t, "redis.test")

	withCA := func(caFile, serverName string) func(*Options) error {
		return func(o *Options) error {
			cfg, err := NewTLSConfig(caFile, serverName)
			o.TLS, o.TLSConfig = true, cfg
			return err
		}
	}
	tests := []struct {
		name    string
		setup   func(*Options) error
		wantErr string
	}{
		{"trusted CA, name from the address (IP SAN)", withCA(files.CAFile, ""), ""},
		{"trusted CA, server name", withCA(files.CAFile, "redis.test"), ""},
		{"wrong server name", withCA(files.CAFile, "other.test"), "certificate"},
		{"another CA", withCA(otherCA.CAFile, ""), "certificate"},
		{"system roots", withCA("", ""), "certificate"},
		{"plain text to a TLS port", func(*Options) error { return nil }, "connect to redis"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ro := connectivityOptions()
			ro.Addr = srv.Addr
			if err := tt.setup(&ro); err != nil {
				t.Fatalf("TLS settings: %v", err)
			}
			c, err := ro.Dial()
			if !opened(t, "Dial", c, err, tt.wantErr) {
				return
			}
			c.Close()
			exerciseConnections(t, ro)
		})
	}
}

func TestNewTLSConfigErrors(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, caFile := range []string{filepath.Join(dir, "missing.pem"), notPEM} {
		if _, err := NewTLSConfig(caFile, ""); err == nil {
			t.Errorf("NewTLSConfig(%q) succeeded, want an error", caFile)
		}
	}
}

// A connection whose server became a replica must leave the pool at its
// first READONLY reply, not be handed out again.
func TestDemotedConnectionLeavesThePool(t *testing.T) {
	primary := redistest.Start(t)
	other := redistest.Start(t)
	ro := connectivityOptions()
	ro.Addr = primary.Addr
	pool := NewPool(ro)
	defer pool.Close()

	c := pool.Get()
	if _, err := c.Do("SET", "k", "v"); err != nil {
		t.Fatalf("SET on the primary: %v", err)
	}
	c.Close()
	if idle := pool.Stats().IdleCount; idle != 1 {
		t.Fatalf("idle connections = %d, want 1", idle)
	}

	demote, err := redis.Dial("tcp", primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer demote.Close()
	host, port, _ := net.SplitHostPort(other.Addr)
	if _, err := demote.Do("REPLICAOF", host, port); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}

	c = pool.Get()
	_, err = c.Do("SET", "k", "w")
	var redisErr redis.Error
	if !errors.As(err, &redisErr) || !strings.HasPrefix(string(redisErr), "READONLY") {
		t.Fatalf("SET on the demoted server = %v, want a READONLY reply", err)
	}
	if !errors.Is(c.Err(), errDemoted) {
		t.Errorf("Err() after READONLY = %v, want errDemoted", c.Err())
	}
	c.Close()
	if stats := pool.Stats(); stats.IdleCount != 0 || stats.ActiveCount != 0 {
		t.Fatalf("after READONLY the pool keeps %d idle of %d connections, want none", stats.IdleCount, stats.ActiveCount)
	}

	// Scripts refused on a replica carry the same prefix.
	c = pool.Get()
	defer c.Close()
	_, err = redis.NewScript(0, "return redis.call('SET', 'k', 'x')").Do(c)
	if !errors.Is(c.Err(), errDemoted) {
		t.Errorf("script on a replica: err %v, Err() %v; want the connection marked demoted", err, c.Err())
	}
}

// fakeSentinel answers every command with the raw RESP reply, like a
// sentinel that names a fixed primary (or none).
func fakeSentinel(t *testing.T, reply string) string {
	t.Helper()
	return serveLoopback(t, func(conn net.Conn) {
		r := bufio.NewReader(conn)
		for readCommand(r) == nil {
			if _, err := conn.Write([]byte(reply)); err != nil {
				return
			}
		}
	})
}

// serveLoopback accepts connections on a loopback port until the test
// ends, each served by handle and then closed, and returns the address.
func serveLoopback(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				handle(conn)
			}()
		}
	}()
	return l.Addr().String()
}

// readCommand reads one RESP array of bulk strings.
func readCommand(r *bufio.Reader) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil {
		return err
	}
	for i := 0; i < 2*n; i++ {
		if _, err := r.ReadString('\n'); err != nil {
			return err
		}
	}
	return nil
}

func respAddr(addr string) string {
	host, port, _ := net.SplitHostPort(addr)
	return fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(host), host, len(port), port)
}

func TestSentinelDiscoveryErrors(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	deadAddr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))

	tests := []struct {
		name      string
		sentinels []string
		want      []string // substrings of the error; none: Dial works
	}{
		{"dead sentinel, then one naming the primary", []string{deadAddr, fakeSentinel(t, respAddr(primary.Addr))}, nil},
		{"sentinel naming a replica", []string{fakeSentinel(t, respAddr(replica.Addr))},
			[]string{replica.Addr, `role "slave"`}},
		{"unknown primary name", []string{fakeSentinel(t, "*-1\r\n")}, []string{`does not monitor a primary named "dq"`}},
		{"sentinel error reply", []string{fakeSentinel(t, "-ERR no such command\r\n")}, []string{"ERR no such command"}},
		{"every sentinel dead", []string{deadAddr, deadAddr}, []string{"no sentinel gave the address", deadAddr}},
		{"primary named but down", []string{fakeSentinel(t, respAddr(deadAddr))}, []string{"connect to redis at " + deadAddr}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ro := connectivityOptions()
			ro.SentinelAddrs, ro.MasterName = tt.sentinels, "dq"
			c, err := ro.Dial()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Dial: %v", err)
				}
				defer c.Close()
				if err := checkPrimary(c); err != nil {
					t.Fatalf("connected to a non-primary: %v", err)
				}
				return
			}
			if err == nil {
				c.Close()
				t.Fatalf("Dial succeeded, want an error containing %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Dial error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// After a failover the pool's idle connections to the old primary are
// checked when borrowed, the demoted ones dropped, and new connections go
// to the promoted replica.
func TestSentinelSwitchover(t *testing.T) {
	primary := redistest.Start(t)
	replica := redistest.StartReplica(t, primary)
	sentinel := redistest.StartSentinel(t, "dq", primary.Addr)
	sentinel.WaitReplicas(t, "dq", 1)

	ro := connectivityOptions()
	ro.SentinelAddrs, ro.MasterName = []string{sentinel.Addr}, "dq"
	pool := NewPool(ro)
	defer pool.Close()
	serverPort := func(c redis.Conn) string {
		t.Helper()
		info, err := redis.String(c.Do("INFO", "server"))
		if err != nil {
			t.Fatalf("INFO server: %v", err)
		}
		return infoField(info, "tcp_port")
	}
	_, primaryPort, _ := net.SplitHostPort(primary.Addr)
	_, replicaPort, _ := net.SplitHostPort(replica.Addr)

	client, err := New(ro, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	if got, err := client.Primaries(context.Background()); err != nil || len(got) != 1 || got[0] != primary.Addr {
		t.Fatalf("Primaries = %v, %v; want the primary %s", got, err, primary.Addr)
	}

	c := pool.Get()
	if got := serverPort(c); got != primaryPort {
		t.Fatalf("connected to port %s, want the primary's %s", got, primaryPort)
	}
	c.Close()
	idle := pool.Get() // kept to test the borrow check below
	if got := serverPort(idle); got != primaryPort {
		t.Fatalf("second connection on port %s, want the primary's %s", got, primaryPort)
	}

	// A switchover without data loss: both servers stay up, and the old
	// primary becomes a replica of the new one.
	if _, err := sentinel.Do("SENTINEL", "FAILOVER", "dq"); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	redistest.WaitFor(t, 20*time.Second, "the sentinel to name the replica as primary", func() bool {
		addr, err := redis.Strings(sentinel.Do("SENTINEL", "get-master-addr-by-name", "dq"))
		return err == nil && len(addr) == 2 && addr[1] == replicaPort
	})
	// The sentinel turns the old primary into a replica at its next INFO
	// poll, up to 10 s away; do it now.
	demote, err := redis.Dial("tcp", primary.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer demote.Close()
	if _, err := demote.Do("REPLICAOF", "127.0.0.1", replicaPort); err != nil {
		t.Fatalf("REPLICAOF: %v", err)
	}
	if err := checkPrimary(idle); err == nil {
		t.Fatal("the old primary still reports the master role")
	}

	// The borrow check tests the role of connections idle for a while.
	ctx := context.Background()
	if err := pool.TestOnBorrowContext(ctx, idle, time.Now().Add(-2*roleCheckAfterIdle)); err == nil {
		t.Error("the borrow check passed a connection to the demoted primary")
	}
	if err := pool.TestOnBorrowContext(ctx, idle, time.Now()); err != nil {
		t.Errorf("the borrow check tested a connection just returned: %v", err)
	}
	idle.Close()

	// Whatever the pool held, a write now lands on the new primary: the
	// connection to the old one fails with READONLY and is dropped.
	redistest.WaitFor(t, 10*time.Second, "a write through the pool to succeed", func() bool {
		c := pool.Get()
		defer c.Close()
		_, err := c.Do("SET", "after", "switchover")
		return err == nil
	})
	c = pool.Get()
	defer c.Close()
	if got := serverPort(c); got != replicaPort {
		t.Fatalf("after the switchover connected to port %s, want the promoted replica's %s", got, replicaPort)
	}
	if got, err := client.Primaries(context.Background()); err != nil || len(got) != 1 || got[0] != replica.Addr {
		t.Fatalf("Primaries after the switchover = %v, %v; want the promoted %s", got, err, replica.Addr)
	}
}

// Without a cluster a Client is the one pool of before: every key goes to
// the one server.
func TestClientWithoutACluster(t *testing.T) {
	srv := redistest.Start(t)
	o := connectivityOptions()
	o.Addr = srv.Addr
	c, err := New(o, nil, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := context.Background()
	if c.Cluster() {
		t.Error("Cluster() = true without cluster addresses")
	}
	for _, key := range []string{"a", "b", "{x}c"} {
		err := c.Do(ctx, key, func(conn redis.Conn) error {
			_, err := conn.Do("SET", key, key)
			return err
		})
		if err != nil {
			t.Fatalf("Do SET %s: %v", key, err)
		}
	}
	primaries, err := c.Primaries(ctx)
	if err != nil || len(primaries) != 1 || primaries[0] != srv.Addr {
		t.Fatalf("Primaries = %v, %v; want [%s]", primaries, err, srv.Addr)
	}
	var n int
	err = c.doAt(ctx, primaries[0], func(conn redis.Conn) error {
		var err error
		// The options' DB is selected.
		n, err = redis.Int(conn.Do("DBSIZE"))
		return err
	})
	if err != nil || n != 3 {
		t.Fatalf("DBSIZE = %d, %v; want the 3 keys", n, err)
	}
	if err := c.CheckServers(ctx); err != nil {
		t.Fatalf("CheckServers: %v", err)
	}
	conn, err := c.Dial(ctx, "a")
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	if v, err := redis.String(conn.Do("GET", "b")); err != nil || v != "b" {
		t.Fatalf("GET on the dialed connection = %q, %v", v, err)
	}
	conn.Close()
	if s := c.Stats(); s.IdleCount != 1 || s.ActiveCount != 1 {
		t.Errorf("Stats = %+v, want one idle connection", s)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Do(ctx, "a", func(redis.Conn) error { return nil }); err == nil {
		t.Error("Do after Close succeeded")
	}
}

// opened checks what opening something (what: "Dial", "New") gave: with
// wantErr, an error containing it (c, opened anyway, is closed); without,
// no error. It reports whether the caller goes on with c.
func opened(t *testing.T, what string, c io.Closer, err error, wantErr string) bool {
	t.Helper()
	switch {
	case wantErr == "" && err != nil:
		t.Fatalf("%s: %v", what, err)
	case wantErr == "":
		return true
	case err == nil:
		c.Close()
		t.Fatalf("%s succeeded, want an error containing %q", what, wantErr)
	case !strings.Contains(err.Error(), wantErr):
		t.Fatalf("%s: %v; want an error containing %q", what, err, wantErr)
	}
	return false
}

// A server that takes commands and never answers (a stopped primary) fails
// a pooled call after the call timeout, not after the read timeout that
// blocking loops need.
func TestAHungServerFailsPooledCallsAfterTheCallTimeout(t *testing.T) {
	t.Parallel()
	silent := serveLoopback(t, func(conn net.Conn) { _, _ = io.Copy(io.Discard, conn) })
	o := connectivityOptions()
	o.Addr, o.DB = silent, 0
	o.ReadTimeout, o.CallTimeout = time.Hour, 300*time.Millisecond
	c, err := New(o, nil, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		done <- c.Do(context.Background(), "k", func(conn redis.Conn) error {
			_, err := conn.Do("PING")
			return err
		})
	}()
	select {
	case err := <-done:
		var netErr net.Error
		if !errors.As(err, &netErr) || !netErr.Timeout() {
			t.Fatalf("pooled call to a hung server: %v, want a timeout", err)
		}
		t.Logf("the pooled call failed after %v", time.Since(start))
	case <-time.After(30 * time.Second):
		t.Fatal("a pooled call to a hung server was still waiting after 30 s (call timeout 300 ms)")
	}
}

// A server that drops a plain-text connection at its first command (a
// TLS-only one) fails the start-up check with a hint to set redis.tls, on
// one server and as a cluster's seed.
func TestAPlainConnectionDroppedHintsAtTLS(t *testing.T) {
	t.Parallel()
	drops := serveLoopback(t, func(conn net.Conn) { _, _ = conn.Read(make([]byte, 64)) })
	const hint = "set redis.tls = true"
	o := connectivityOptions()
	o.Addr, o.DB = drops, 0
	c, err := New(o, nil, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.CheckServers(context.Background()); err == nil || !strings.Contains(err.Error(), hint) {
		t.Errorf("one server: %v, want the hint %q", err, hint)
	}
	o = connectivityOptions()
	o.DB, o.ClusterAddrs = 0, []string{drops}
	if _, err := New(o, nil, nil); err == nil || !strings.Contains(err.Error(), hint) {
		t.Errorf("a cluster seed: %v, want the hint %q", err, hint)
	}
}

// A borrower of a pool whose idle connections are checked (here the role
// check of Sentinel's, after a second idle) pays for one check when Redis
// hangs, not for one per idle connection: once one check failed, the other
// idle connections are dropped unchecked.
func TestAHungServerCostsOneIdleCheck(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	o := connectivityOptions()
	o.Addr, o.CallTimeout = srv.Addr, 500*time.Millisecond
	p := o.pooled()
	pool := p.newPool(p.dialContext, true)
	t.Cleanup(func() { pool.Close() })
	ctx := context.Background()
	var conns []redis.Conn
	for range 20 {
		c, err := pool.GetContext(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do("PING"); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Close()
	}
	time.Sleep(roleCheckAfterIdle + 100*time.Millisecond) // idle long enough to be checked
	srv.Pause(t)
	start := time.Now()
	c, err := pool.GetContext(ctx)
	if err == nil {
		_, err = c.Do("PING")
		c.Close()
	}
	if err == nil {
		t.Fatal("a connection to a hung Redis answered")
	}
	// One check (1 s) and one dial (its SELECT: 0.5 s), where checking the
	// 20 idle connections in turn took 20 times 0.5 s.
	if took := time.Since(start); took > 6*time.Second {
		t.Errorf("borrowing from a hung Redis took %v", took)
	}
}
