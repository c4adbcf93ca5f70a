// Package redistest holds what the tests of every package share: the
// throwaway Redis they run on (a real redis-server on a free loopback
// port, an in-process miniredis, a Redis Cluster, Sentinel), the backends
// that run a test once per kind of Redis (ForEach), waiting on a
// condition (WaitFor), and a logger writing to the test's output
// (Logger).
package redistest

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
)

// RequireEnv names the environment variable that turns a missing
// redis-server binary from a skip into a failure (CI sets it).
const RequireEnv = "DQ_REQUIRE_REDIS"

// Server is a redis-server process started for one test.
type Server struct {
	Addr string
	Dir  string
	cmd  *exec.Cmd
	args []string
	// tls, when set, makes the server listen for TLS only (port 0 and
	// tls-port) and is how the helper connects to it.
	tls *tls.Config
}

// FreePort returns a loopback TCP port that was free a moment ago, taken
// below the kernel's range of ephemeral ports (32768 and up on Linux), as
// the cluster nodes' are, but not from theirs (see clusterPortsEnd). A
// port of that range, once its listener closes, may go at once to another
// test's listener on port 0 or to the source port of a connection, and the
// process started on it then exits with "address already in use" (seen in
// a clean-clone CI run, TestProcessOperations).
// Past 100 ports found taken, it takes one from the kernel.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 100 {
		if port := freePortCandidate(); portFree(port) {
			return port
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Binary returns the path of the named program (redis-server,
// redis-sentinel, redis-cli), or skips the test (fails it when
// DQ_REQUIRE_REDIS=1) when it is absent.
func Binary(t testing.TB, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			pkg := name
			if name == "redis-cli" {
				pkg = "redis-tools" // Debian's package for it
			}
			t.Fatalf("%s not found in PATH and %s=1: install it (apt-get install %s)", name, RequireEnv, pkg)
		}
		t.Skipf("%s not found in PATH: skipping the real-Redis variant (set %s=1 to make this a failure)", name, RequireEnv)
	}
	return path
}

// Start runs a redis-server on a free loopback port with its data in a
// temporary directory, and stops it when the test ends. extra holds more
// config directives such as "appendonly yes".
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	return startServer(t, nil, extra)
}

func startServer(t testing.TB, clientTLS *tls.Config, extra []string) *Server {
	t.Helper()
	bin := Binary(t, "redis-server")
	dir := t.TempDir()
	s := &Server{Dir: dir, tls: clientTLS}
	s.args = append([]string{bin}, extra...)
	var lastErr error
	for try := 0; try < 5; try++ {
		port := FreePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(port)
		if lastErr = s.start(port); lastErr != nil {
			continue
		}
		// Another test's server may have taken the port between FreePort
		// and the start: then the one answering is not this process.
		if lastErr = s.checkPID(); lastErr != nil {
			s.Stop()
			continue
		}
		t.Cleanup(s.Stop)
		return s
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

func (s *Server) start(port int) error {
	listen := []string{"port " + strconv.Itoa(port)}
	if s.tls != nil {
		listen = []string{"port 0", "tls-port " + strconv.Itoa(port)}
	}
	conf := append(listen,
		"bind 127.0.0.1",
		"dir "+s.Dir,
		"save \"\"",
		"daemonize no",
		"protected-mode no",
	)
	conf = append(conf, s.args[1:]...)
	cmd, err := startProcess(s.args[0], s.Dir, "redis", conf, s.Addr, s.tls)
	if err != nil {
		return err
	}
	s.cmd = cmd
	return nil
}

// startProcess writes conf to <dir>/<name>.conf, runs bin on it with its
// output in <dir>/<name>.log, and waits until addr answers PING. On failure
// the process is stopped and the error carries its log.
func startProcess(bin, dir, name string, conf []string, addr string, tlsConfig *tls.Config) (*exec.Cmd, error) {
	confPath := filepath.Join(dir, name+".conf")
	if err := os.WriteFile(confPath, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child keeps its own descriptor
	cmd := exec.Command(bin, confPath)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(addr, tlsConfig) == nil {
			return cmd, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	out, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("%s on %s did not answer PING: %s", filepath.Base(bin), addr, out)
}

// Stop kills the server (if still running) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Pause stops the server's process (SIGSTOP) as a hung machine would: its
// connections stay open and answer nothing. The test's end resumes it.
func (s *Server) Pause(t testing.TB) {
	t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("pause redis-server: %v", err)
	}
	t.Cleanup(s.Resume)
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(syscall.SIGCONT)
	}
}

// Restart stops the server and starts it again on the same port and data
// directory, so AOF/RDB files written so far are loaded again.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(os.Interrupt)
		_ = s.cmd.Wait()
		s.cmd = nil
	}
	_, portStr, _ := net.SplitHostPort(s.Addr)
	port, _ := strconv.Atoi(portStr)
	if err := s.start(port); err != nil {
		t.Fatalf("restart redis-server: %v", err)
	}
}

// ping sends PING, over TLS when clientTLS is set, and wants PONG.
func ping(addr string, clientTLS *tls.Config) error {
	var c net.Conn
	var err error
	if clientTLS != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, clientTLS)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// Mini starts an in-process miniredis that stops when the test ends.
func Mini(t testing.TB) *miniredis.Miniredis {
	t.Helper()
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		t.Fatalf("start miniredis: %v", err)
	}
	t.Cleanup(m.Close)
	return m
}
