package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Sentinel is a redis-sentinel process started for one test.
type Sentinel struct {
	Addr string
	Dir  string
	cmd  *exec.Cmd
}

// StartReplica runs a redis-server replicating primary (replicaof) and
// waits until its link to the primary is up. extra holds more config
// directives. It sets the primary's repl-diskless-sync-delay to 0, so the
// first sync starts at once rather than after the default 5 s.
func StartReplica(t testing.TB, primary *Server, extra ...string) *Server {
	t.Helper()
	host, port, err := net.SplitHostPort(primary.Addr)
	if err != nil {
		t.Fatalf("primary address %q: %v", primary.Addr, err)
	}
	if _, err := primary.do("CONFIG", "SET", "repl-diskless-sync-delay", "0"); err != nil {
		t.Fatalf("primary %s: CONFIG SET repl-diskless-sync-delay: %v", primary.Addr, err)
	}
	replica := startServer(t, primary.tls, append([]string{"replicaof " + host + " " + port}, extra...))
	WaitFor(t, 10*time.Second, "replica "+replica.Addr+" linked to "+primary.Addr, func() bool {
		info, err := redis.String(replica.do("INFO", "replication"))
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	return replica
}

// do sends one command to the server on a new connection.
func (s *Server) do(cmd string, args ...any) (any, error) {
	opts := []redis.DialOption{redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second)}
	if s.tls != nil {
		opts = append(opts, redis.DialUseTLS(true), redis.DialTLSConfig(s.tls))
	}
	c, err := redis.Dial("tcp", s.Addr, opts...)
	if err != nil {
		return "", err
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

// StartSentinel runs a redis-sentinel on a free loopback port that monitors
// the primary at primaryAddr under masterName with quorum 1 and short
// timeouts: the primary is thought down after 1 s of silence, and a failover
// is retried after 3 s. extra holds more config directives (later lines win).
// It stops when the test ends.
func StartSentinel(t testing.TB, masterName, primaryAddr string, extra ...string) *Sentinel {
	t.Helper()
	bin := Binary(t, "redis-sentinel")
	host, port, err := net.SplitHostPort(primaryAddr)
	if err != nil {
		t.Fatalf("primary address %q: %v", primaryAddr, err)
	}
	s := &Sentinel{Dir: t.TempDir()}
	var lastErr error
	for try := 0; try < 5; try++ {
		sentinelPort := FreePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(sentinelPort)
		conf := append([]string{
			"port " + strconv.Itoa(sentinelPort),
			"bind 127.0.0.1",
			"dir " + s.Dir,
			"daemonize no",
			"protected-mode no",
			fmt.Sprintf("sentinel monitor %s %s %s 1", masterName, host, port),
			"sentinel down-after-milliseconds " + masterName + " 1000",
			"sentinel failover-timeout " + masterName + " 3000",
			"sentinel parallel-syncs " + masterName + " 1",
		}, extra...)
		if lastErr = s.start(bin, conf); lastErr == nil {
			t.Cleanup(s.Stop)
			return s
		}
	}
	t.Fatalf("start redis-sentinel: %v", lastErr)
	return nil
}

func (s *Sentinel) start(bin string, conf []string) error {
	// Sentinel rewrites its config file as it learns the topology, so it
	// lives in the sentinel's own directory.
	cmd, err := startProcess(bin, s.Dir, "sentinel", conf, s.Addr, nil)
	if err != nil {
		return err
	}
	s.cmd = cmd
	return nil
}

// Stop kills the sentinel (if still running) and waits for it.
func (s *Sentinel) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Log returns what the sentinel logged so far (its view of a failover).
func (s *Sentinel) Log() string {
	out, _ := os.ReadFile(filepath.Join(s.Dir, "sentinel.log"))
	return string(out)
}

// Do sends one command to the sentinel.
func (s *Sentinel) Do(cmd string, args ...any) (any, error) {
	c, err := redis.Dial("tcp", s.Addr, redis.DialConnectTimeout(time.Second), redis.DialReadTimeout(time.Second))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Do(cmd, args...)
}

// WaitReplicas waits until the sentinel knows n replicas of masterName that
// are connected and whose link to the primary is up: before that, it could
// not promote one.
func (s *Sentinel) WaitReplicas(t testing.TB, masterName string, n int) {
	t.Helper()
	WaitFor(t, 15*time.Second, fmt.Sprintf("sentinel %s to see %d healthy replicas of %s", s.Addr, n, masterName), func() bool {
		replicas, err := redis.Values(s.Do("SENTINEL", "replicas", masterName))
		if err != nil {
			return false
		}
		healthy := 0
		for _, r := range replicas {
			fields, err := redis.StringMap(r, nil)
			if err != nil {
				return false
			}
			if fields["flags"] == "slave" && fields["master-link-status"] == "ok" {
				healthy++
			}
		}
		return healthy >= n
	})
}
