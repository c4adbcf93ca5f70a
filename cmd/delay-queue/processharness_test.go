package main

// Harness for the process-level tests in process_test.go: it builds the
// server binary once, runs it as a child process with its own conf file on
// a free loopback port, talks to it over HTTP, and stops it by PID.
// Package-level names carry a "proc" prefix because other test files share
// package main; this file owns the package's TestMain.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
	"github.com/gomodule/redigo/redis"
)

// procBuild holds the binary shared by every process-level test. It is
// package-level because building once per test would relink the (race)
// binary eight times; TestMain owns its directory.
var procBuild struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "delay-queue-process-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create build directory:", err)
		os.Exit(1)
	}
	procBuild.dir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// procBinary builds the server once, with -race so that a data race in the
// server under these multi-process loads makes it exit non-zero (66) and is
// reported; the race build is slower, but the whole file still runs well
// inside its time budget.
func procBinary(t testing.TB) string {
	t.Helper()
	procBuild.once.Do(func() {
		procBuild.path = filepath.Join(procBuild.dir, "delay-queue")
		cmd := exec.Command("go", "build", "-race", "-o", procBuild.path, ".")
		out, err := cmd.CombinedOutput()
		if err != nil {
			procBuild.err = fmt.Errorf("go build -race: %w\n%s", err, out)
		}
	})
	if procBuild.err != nil {
		t.Fatalf("build the server: %v", procBuild.err)
	}
	return procBuild.path
}

// procOutput collects a child's output; the process writes from its own
// goroutines while the test reads.
type procOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *procOutput) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *procOutput) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// procConf is the ini conf of one server process, in the original's format.
type procConf struct {
	BindAddress string
	RedisAddr   string
	// ClusterAddrs, when set, are a Redis Cluster's seed nodes: the conf
	// then names them instead of RedisAddr, with db 0 and no bucket_size
	// (the cluster default), unless Extra sets one.
	ClusterAddrs []string
	// BucketSize, when set, is the conf's bucket_size; unset, a single
	// Redis gets 3 and a cluster none.
	BucketSize int
	Extra      []string // more "key = value" lines
}

func (c procConf) render() string {
	lines := []string{
		"bind_address = " + c.BindAddress,
		"queue_block_timeout = 178",
	}
	bucketSize := c.BucketSize
	if len(c.ClusterAddrs) > 0 {
		lines = append(lines,
			"redis.cluster_addrs = "+strings.Join(c.ClusterAddrs, ","),
			"redis.db = 0",
		)
	} else {
		lines = append(lines,
			"redis.host = "+c.RedisAddr,
			"redis.db = 1",
		)
		bucketSize = cmp.Or(bucketSize, 3)
	}
	if bucketSize != 0 {
		lines = append(lines, "bucket_size = "+strconv.Itoa(bucketSize))
	}
	lines = append(lines, c.Extra...)
	return strings.Join(lines, "\n") + "\n"
}

// procServer is one delay-queue server started by a test. Start, Kill and
// Start again reuse the same conf (and so the same port).
type procServer struct {
	t        testing.TB
	name     string
	bin      string
	confPath string
	addr     string
	baseURL  string
	output   *procOutput // stdout and stderr of every incarnation

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{} // closed when the current incarnation has exited
	waitErr  error
	runCount int
}

// newProcServer writes a conf for a server on a free port and returns it, not
// yet started. The process is stopped (SIGTERM, then SIGKILL) when the test
// ends, and its output is logged if the test failed.
func newProcServer(t testing.TB, name, redisAddr string, extra ...string) *procServer {
	t.Helper()
	return newProcServerConf(t, name, procConf{RedisAddr: redisAddr, Extra: extra})
}

// newProcClusterServer is newProcServer for a server on the Redis Cluster
// whose seed nodes are clusterAddrs.
func newProcClusterServer(t testing.TB, name string, clusterAddrs []string, extra ...string) *procServer {
	t.Helper()
	return newProcServerConf(t, name, procConf{ClusterAddrs: clusterAddrs, Extra: extra})
}

// newProcServerConf is newProcServer with conf, whose BindAddress it sets.
func newProcServerConf(t testing.TB, name string, conf procConf) *procServer {
	t.Helper()
	bin := procBinary(t)
	addr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	conf.BindAddress = addr
	confPath := filepath.Join(t.TempDir(), name+".conf")
	if err := os.WriteFile(confPath, []byte(conf.render()), 0o600); err != nil {
		t.Fatalf("write conf: %v", err)
	}
	s := &procServer{
		t:        t,
		name:     name,
		bin:      bin,
		confPath: confPath,
		addr:     addr,
		baseURL:  "http://" + addr,
		output:   &procOutput{},
	}
	t.Cleanup(func() {
		if s.running() {
			s.terminate(10 * time.Second)
		}
		out := s.output.String()
		if strings.Contains(out, "WARNING: DATA RACE") {
			t.Errorf("server %s reported a data race:\n%s", name, out)
			return
		}
		if t.Failed() {
			t.Logf("output of server %s:\n%s", name, out)
		}
	})
	return s
}

// startProcServer is newProcServer followed by Start.
func startProcServer(t testing.TB, name, redisAddr string, extra ...string) *procServer {
	t.Helper()
	s := newProcServer(t, name, redisAddr, extra...)
	s.Start()
	return s
}

// launch starts a new incarnation of the process without waiting for it to
// be ready.
func (s *procServer) launch() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		select {
		case <-s.exited:
		default:
			s.t.Fatalf("server %s: launch while still running", s.name)
		}
	}
	s.runCount++
	fmt.Fprintf(s.output, "----- %s run %d -----\n", s.name, s.runCount)
	cmd := exec.Command(s.bin, "-c", s.confPath)
	cmd.Stdout = s.output
	cmd.Stderr = s.output
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start server %s: %v", s.name, err)
	}
	exited := make(chan struct{})
	s.cmd = cmd
	s.exited = exited
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}()
}

// Start launches the process and waits until it answers HTTP.
func (s *procServer) Start() {
	s.t.Helper()
	s.launch()
	s.waitReady(20 * time.Second)
}

// waitReady polls POST /get until the server answers with an envelope, and
// fails at once if the process exits first.
func (s *procServer) waitReady(timeout time.Duration) {
	s.t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(timeout)
	exited := s.exitedChan()
	for {
		select {
		case <-exited:
			s.t.Fatalf("server %s exited before it was ready (%v):\n%s", s.name, s.exitErr(), s.output.String())
		default:
		}
		resp, err := client.Post(s.baseURL+"/get", "application/json", strings.NewReader(`{"id":"readiness-probe"}`))
		if err == nil {
			var env procEnvelope
			decodeErr := json.NewDecoder(resp.Body).Decode(&env)
			resp.Body.Close()
			if decodeErr == nil {
				return
			}
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("server %s not ready after %v (last error %v):\n%s", s.name, timeout, err, s.output.String())
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

func (s *procServer) exitedChan() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}

func (s *procServer) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.waitErr
}

func (s *procServer) running() bool {
	exited := s.exitedChan()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

func (s *procServer) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd == nil {
		s.t.Fatalf("server %s: signal %v before start", s.name, sig)
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		s.t.Fatalf("server %s: send %v to pid %d: %v", s.name, sig, cmd.Process.Pid, err)
	}
}

// waitExit waits for the current incarnation to exit and returns its exit
// code (-1 for death by signal); ok is false when the deadline passed first.
func (s *procServer) waitExit(timeout time.Duration) (code int, ok bool) {
	exited := s.exitedChan()
	select {
	case <-exited:
	case <-time.After(timeout):
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd.ProcessState.ExitCode(), true
}

// Kill sends SIGKILL and waits for the process to be gone.
func (s *procServer) Kill() {
	s.t.Helper()
	s.signal(syscall.SIGKILL)
	if _, ok := s.waitExit(10 * time.Second); !ok {
		s.t.Fatalf("server %s did not die after SIGKILL", s.name)
	}
}

// terminate sends SIGTERM, waits up to timeout, then SIGKILL; it returns the
// exit code and whether the process exited on SIGTERM alone.
func (s *procServer) terminate(timeout time.Duration) (code int, graceful bool) {
	s.t.Helper()
	s.signal(syscall.SIGTERM)
	if code, ok := s.waitExit(timeout); ok {
		return code, true
	}
	s.signal(syscall.SIGKILL)
	code, _ = s.waitExit(10 * time.Second)
	return code, false
}

// Stop sends SIGTERM and requires a clean exit (status 0) within timeout.
func (s *procServer) Stop(timeout time.Duration) {
	s.t.Helper()
	start := time.Now()
	code, graceful := s.terminate(timeout)
	if !graceful {
		s.t.Fatalf("server %s did not exit within %v of SIGTERM (killed)", s.name, timeout)
	}
	if code != 0 {
		s.t.Fatalf("server %s exited with status %d after SIGTERM, want 0", s.name, code)
	}
	s.t.Logf("server %s exited 0 %v after SIGTERM", s.name, time.Since(start).Round(time.Millisecond))
}

// procEnvelope is every answer of the API.
type procEnvelope wire.Envelope[json.RawMessage]

func (e procEnvelope) dataIsNull() bool {
	return len(e.Data) == 0 || string(e.Data) == "null"
}

// procPush is the body of /push as the original server's clients send it,
// with "delay" always given (wire.PushJob leaves it out when nil).
type procPush struct {
	Topic   string `json:"topic"`
	ID      string `json:"id"`
	Delay   int64  `json:"delay"`
	DelayMS *int64 `json:"delay_ms,omitempty"`
	TTR     int64  `json:"ttr"`
	Body    string `json:"body"`
}

// procPopped is the data of a /pop answer.
type procPopped = wire.Delivery

// procStored is the data of a /get answer; Delay is the due time in absolute
// unix seconds.
type procStored = wire.JobInfo

// procClient talks to any of the test's servers over kept-alive connections.
type procClient struct {
	http *http.Client
}

func newProcClient() *procClient {
	transport := &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
	}
	return &procClient{http: &http.Client{Transport: transport}}
}

func (c *procClient) close() {
	c.http.CloseIdleConnections()
}

// call POSTs body as JSON to baseURL+path and decodes the procEnvelope; the
// request is bounded by timeout. It also returns the HTTP status.
func (c *procClient) call(baseURL, path string, body any, timeout time.Duration) (procEnvelope, int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return c.callContext(ctx, baseURL, path, body)
}

// callContext is call bounded by ctx instead of a timeout.
func (c *procClient) callContext(ctx context.Context, baseURL, path string, body any) (procEnvelope, int, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return procEnvelope{}, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, baseURL+path, bytes.NewReader(payload))
	if err != nil {
		return procEnvelope{}, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return procEnvelope{}, 0, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return procEnvelope{}, resp.StatusCode, fmt.Errorf("read answer of %s: %w", path, err)
	}
	var env procEnvelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return procEnvelope{}, resp.StatusCode, fmt.Errorf("decode answer of %s (status %d): %w: %q", path, resp.StatusCode, err, raw)
	}
	return env, resp.StatusCode, nil
}

const procCallTimeout = 10 * time.Second

// mustOK calls path and fails the test unless it answers status 200, code 0.
func (c *procClient) mustOK(t testing.TB, s *procServer, path string, body any) procEnvelope {
	t.Helper()
	env, status, err := c.call(s.baseURL, path, body, procCallTimeout)
	if err != nil {
		t.Fatalf("%s %s: %v", s.name, path, err)
	}
	if status != http.StatusOK || env.Code != 0 {
		t.Fatalf("%s %s %+v: status %d, code %d, message %q; want 200, code 0", s.name, path, body, status, env.Code, env.Message)
	}
	return env
}

func (c *procClient) mustPush(t testing.TB, s *procServer, job procPush) {
	t.Helper()
	c.mustOK(t, s, "/push", job)
}

// mustPop pops with a hold of holdSeconds and returns the job, or nil for
// data null.
func (c *procClient) mustPop(t testing.TB, s *procServer, topic string, holdSeconds int) *procPopped {
	t.Helper()
	env, status, err := c.call(s.baseURL, "/pop", wire.PopRequest{Topic: topic, Timeout: int64(holdSeconds)}, time.Duration(holdSeconds)*time.Second+procCallTimeout)
	if err != nil {
		t.Fatalf("%s /pop %q: %v", s.name, topic, err)
	}
	if status != http.StatusOK || env.Code != 0 {
		t.Fatalf("%s /pop %q: status %d, code %d, message %q; want 200, code 0", s.name, topic, status, env.Code, env.Message)
	}
	return procDecodePopped(t, env)
}

// pop is a /pop that reports failures instead of failing the test, for
// goroutines and for runs where servers are killed on purpose. job is nil
// for data null or on error.
func (c *procClient) pop(s *procServer, topic string, holdSeconds int) (*procPopped, procEnvelope, error) {
	env, status, err := c.call(s.baseURL, "/pop", wire.PopRequest{Topic: topic, Timeout: int64(holdSeconds)}, time.Duration(holdSeconds)*time.Second+procCallTimeout)
	if err != nil {
		return nil, env, err
	}
	if status != http.StatusOK || env.Code != 0 {
		return nil, env, fmt.Errorf("%s /pop %q: status %d, code %d, message %q", s.name, topic, status, env.Code, env.Message)
	}
	if env.dataIsNull() {
		return nil, env, nil
	}
	var job procPopped
	if err := json.Unmarshal(env.Data, &job); err != nil {
		return nil, env, fmt.Errorf("%s /pop: decode data %s: %w", s.name, env.Data, err)
	}
	return &job, env, nil
}

// ok is a call that must answer status 200, code 0; it reports failures
// instead of failing the test.
func (c *procClient) ok(s *procServer, path string, body any) error {
	env, status, err := c.call(s.baseURL, path, body, procCallTimeout)
	if err != nil {
		return err
	}
	if status != http.StatusOK || env.Code != 0 {
		return fmt.Errorf("%s %s: status %d, code %d, message %q", s.name, path, status, env.Code, env.Message)
	}
	return nil
}

func procDecodePopped(t testing.TB, env procEnvelope) *procPopped {
	t.Helper()
	if env.dataIsNull() {
		return nil
	}
	var job procPopped
	if err := json.Unmarshal(env.Data, &job); err != nil {
		t.Fatalf("decode /pop data %s: %v", env.Data, err)
	}
	return &job
}

// mustGet returns the /get view of id, or nil for data null.
func (c *procClient) mustGet(t testing.TB, s *procServer, id string) *procStored {
	t.Helper()
	env := c.mustOK(t, s, "/get", wire.IDRequest{ID: id})
	if env.dataIsNull() {
		return nil
	}
	var job procStored
	if err := json.Unmarshal(env.Data, &job); err != nil {
		t.Fatalf("decode /get data %s: %v", env.Data, err)
	}
	return &job
}

// procRedisConn dials db of the test's redis-server, for fixtures and for
// reading the server's clock (Redis TIME is the engine's one clock).
func procRedisConn(t testing.TB, addr string, db int) redis.Conn {
	t.Helper()
	conn, err := redis.Dial("tcp", addr, redis.DialDatabase(db), redis.DialConnectTimeout(2*time.Second),
		redis.DialReadTimeout(5*time.Second), redis.DialWriteTimeout(5*time.Second))
	if err != nil {
		t.Fatalf("dial redis %s: %v", addr, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// procRedisNow reads Redis TIME, the clock the engine schedules by.
func procRedisNow(t testing.TB, conn redis.Conn) time.Time {
	t.Helper()
	parts, err := redis.Int64s(conn.Do("TIME"))
	if err != nil || len(parts) != 2 {
		t.Fatalf("redis TIME: %v %v", parts, err)
	}
	return time.Unix(parts[0], parts[1]*1000)
}

// procLastLines returns the last n lines of out, for short failure messages.
func procLastLines(out string, n int) string {
	var lines []string
	scanner := bufio.NewScanner(strings.NewReader(out))
	for scanner.Scan() {
		lines = append(lines, scanner.Text())
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
