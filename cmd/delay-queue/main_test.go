package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

// logSink collects what run writes to stderr, lets a test wait for a line,
// and forwards every line to t.Log.
type logSink struct {
	t       *testing.T
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func newLogSink(t *testing.T) *logSink {
	return &logSink{t: t, changed: make(chan struct{})}
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.t.Log(strings.TrimRight(string(p), "\n"))
	s.buf.Write(p)
	close(s.changed)
	s.changed = make(chan struct{})
	return len(p), nil
}

func (s *logSink) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// waitFor returns the first submatch of re in the log, waiting for it to
// appear until the deadline.
func (s *logSink) waitFor(re *regexp.Regexp, within time.Duration) (string, error) {
	deadline := time.After(within)
	for {
		s.mu.Lock()
		m := re.FindStringSubmatch(s.buf.String())
		changed := s.changed
		s.mu.Unlock()
		if m != nil {
			return m[len(m)-1], nil
		}
		select {
		case <-changed:
		case <-deadline:
			return "", fmt.Errorf("no log line matching %s within %s", re, within)
		}
	}
}

func writeConf(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "delay-queue.conf")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// deadAddress returns a loopback address that nothing listens on.
func deadAddress(t *testing.T) string {
	return "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
}

// runShort calls run for arguments that must return at once (no server).
func runShort(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	logs := newLogSink(t)
	err = run(ctx, args, &out, logs)
	return out.String(), logs.String(), err
}

func TestRunWithoutServing(t *testing.T) {
	dead := deadAddress(t)
	tests := []struct {
		name       string
		args       []string
		wantStdout string // substring; "" checks stdout is empty
		wantErr    []string
		wantUsage  bool // the error is a usage error
		wantLog    []string
	}{
		{
			name:       "version",
			args:       []string{"-v"},
			wantStdout: "delay-queue dev\n",
		},
		{
			name:       "version wins over a bad conf",
			args:       []string{"-v", "-c", "/nonexistent.conf"},
			wantStdout: "delay-queue dev\n",
		},
		{
			name:       "help",
			args:       []string{"-h"},
			wantStdout: "-embedded",
		},
		{
			name:      "unknown flag",
			args:      []string{"-x"},
			wantErr:   []string{"-x"},
			wantUsage: true,
		},
		{
			name:      "stray argument",
			args:      []string{"serve"},
			wantErr:   []string{`unexpected argument "serve"`},
			wantUsage: true,
		},
		{
			name:    "missing conf file",
			args:    []string{"-c", "/nonexistent/delay-queue.conf"},
			wantErr: []string{"/nonexistent/delay-queue.conf"},
		},
		{
			name:    "malformed number names the key",
			args:    []string{"-c", writeConf(t, "bucket_size = three")},
			wantErr: []string{"bucket_size", `"three"`},
		},
		{
			name:    "invalid relation names both keys",
			args:    []string{"-c", writeConf(t, "queue_block_timeout = 200")},
			wantErr: []string{"queue_block_timeout = 200", "redis.read_timeout"},
		},
		{
			name:    "redis down names the address",
			args:    []string{"-c", writeConf(t, "redis.host = "+dead)},
			wantErr: []string{dead},
		},
		{
			name:    "unknown key is a warning, not an error",
			args:    []string{"-c", writeConf(t, "bucket = 5", "redis.host = "+dead)},
			wantErr: []string{dead},
			wantLog: []string{"level=WARN", "unknown key bucket ignored"},
		},
		{
			name:    "a repeated key is a warning naming it",
			args:    []string{"-c", writeConf(t, "callback_allow = 127.0.0.1", "redis.host = "+dead, "callback_allow =")},
			wantErr: []string{dead},
			wantLog: []string{"level=WARN", "callback_allow is given 2 times: the last value is used"},
		},
		{
			name:    "log format json",
			args:    []string{"-c", writeConf(t, "bucket = 5", "log_format = json", "redis.host = "+dead)},
			wantErr: []string{dead},
			wantLog: []string{`"level":"WARN"`, "unknown key bucket ignored"},
		},
		{
			name:    "log level error hides warnings",
			args:    []string{"-c", writeConf(t, "bucket = 5", "log_level = error", "redis.host = "+dead)},
			wantErr: []string{dead},
		},
		{
			name:    "busy bind address",
			args:    []string{"-embedded", "-c", writeConf(t, "bind_address = "+busyAddress(t))},
			wantErr: []string{"listen on bind_address"},
			wantLog: []string{"jobs live in this process's memory only"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			stdout, stderr, err := runShort(t, tt.args...)
			if tt.wantStdout == "" && stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if !strings.Contains(stdout, tt.wantStdout) {
				t.Errorf("stdout = %q, want it to contain %q", stdout, tt.wantStdout)
			}
			if len(tt.wantErr) == 0 && err != nil {
				t.Fatalf("run: %v", err)
			}
			if len(tt.wantErr) > 0 {
				if err == nil {
					t.Fatalf("run succeeded, want an error containing %q", tt.wantErr)
				}
				for _, w := range tt.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				if strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q spans several lines", err)
				}
				var usage usageError
				if errors.As(err, &usage) != tt.wantUsage {
					t.Errorf("error %q: usage error = %v, want %v", err, !tt.wantUsage, tt.wantUsage)
				}
			}
			for _, w := range tt.wantLog {
				if !strings.Contains(stderr, w) {
					t.Errorf("log %q does not contain %q", stderr, w)
				}
			}
			if len(tt.wantLog) == 0 && strings.Contains(stderr, "WARN") {
				t.Errorf("log %q has a warning, want none", stderr)
			}
		})
	}
}

// busyAddress returns an address a listener holds until the test ends.
func busyAddress(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().String()
}

var (
	listeningText = regexp.MustCompile(`msg=listening addr=(\S+)`)
	listeningJSON = regexp.MustCompile(`"msg":"listening","addr":"([^"]+)"`)
)

type envelope = wire.Envelope[json.RawMessage]

func post(t *testing.T, base, path, body string) envelope {
	t.Helper()
	env, err := postContext(context.Background(), base, path, body)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func postContext(ctx context.Context, base, path, body string) (envelope, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+base+path, strings.NewReader(body))
	if err != nil {
		return envelope{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return envelope{}, fmt.Errorf("POST %s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return envelope{}, fmt.Errorf("POST %s: read: %w", path, err)
	}
	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		return envelope{}, fmt.Errorf("POST %s: answer %q is not an envelope: %w", path, raw, err)
	}
	return env, nil
}

// TestRunServesAndShutsDown starts the whole server, uses it, then cancels
// the context as a signal would: a held pop must answer data:null promptly
// and run must return nil.
func TestRunServesAndShutsDown(t *testing.T) {
	tests := []struct {
		name      string
		args      func(t *testing.T) []string
		listening *regexp.Regexp
		wantLog   []string
	}{
		{
			name: "embedded flag",
			args: func(t *testing.T) []string {
				return []string{"-embedded", "-c", writeConf(t, "bind_address = 127.0.0.1:0")}
			},
			listening: listeningText,
			wantLog:   []string{"jobs live in this process's memory only"},
		},
		{
			name: "embedded host in the conf, json logs",
			args: func(t *testing.T) []string {
				return []string{"-c", writeConf(t, "bind_address = 127.0.0.1:0", "redis.host = embedded", "log_format = json")}
			},
			listening: listeningJSON,
			wantLog:   []string{"jobs live in this process's memory only"},
		},
		{
			name: "real redis",
			args: func(t *testing.T) []string {
				srv := redistest.Start(t)
				return []string{"-c", writeConf(t, "bind_address = 127.0.0.1:0", "[redis]", "host = "+srv.Addr, "db = 2")}
			},
			listening: listeningText,
			wantLog:   []string{"imported jobs left by the original server", "count=0"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := tt.args(t)
			logs := newLogSink(t)
			ctx, stop := context.WithCancel(context.Background())
			defer stop()
			done := make(chan error, 1)
			go func() { done <- run(ctx, args, io.Discard, logs) }()

			addr, err := logs.waitFor(tt.listening, 20*time.Second)
			if err != nil {
				stop()
				t.Fatalf("%v (run returned %v)", err, <-done)
			}

			if env := post(t, addr, "/push", `{"topic":"mail","id":"job-1","delay":0,"ttr":30,"body":"hello"}`); env.Code != 0 {
				t.Fatalf("push: %+v", env)
			}
			env := post(t, addr, "/pop", `{"topic":"mail","timeout":5}`)
			if env.Code != 0 || !strings.Contains(string(env.Data), `"id":"job-1"`) || !strings.Contains(string(env.Data), `"body":"hello"`) {
				t.Fatalf("pop: %+v", env)
			}
			if env := post(t, addr, "/finish", `{"id":"job-1"}`); env.Code != 0 {
				t.Fatalf("finish: %+v", env)
			}

			// A pop held for the whole queue_block_timeout must be answered
			// as soon as shutdown starts.
			held := make(chan heldAnswer, 1)
			sent := make(chan struct{})
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) }}
			go func() {
				env, err := postContext(httptrace.WithClientTrace(context.Background(), trace), addr, "/pop", `{"topic":"empty"}`)
				held <- heldAnswer{env, err}
			}()
			<-sent
			// Once the engine holds the pop, its request is being served:
			// shutdown must answer it rather than drop its connection.
			if err := waitForMetric(addr, "delayqueue_held_pops 1", 10*time.Second); err != nil {
				t.Fatal(err)
			}
			if env := post(t, addr, "/pop", `{"topic":"other","timeout":0}`); env.Code != 0 || string(env.Data) != "null" {
				t.Fatalf("pop with timeout 0: %+v", env)
			}
			shutdownStart := time.Now()
			stop()
			select {
			case answer := <-held:
				if answer.err != nil {
					t.Fatalf("held pop: %v", answer.err)
				}
				if answer.env.Code != 0 || string(answer.env.Data) != "null" {
					t.Errorf("held pop answered %+v, want code 0 and data null", answer.env)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("held pop was not answered within 10s of shutdown")
			}
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("run: %v", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("run did not return within 20s of shutdown")
			}
			t.Logf("shutdown took %s", time.Since(shutdownStart))

			logText := logs.String()
			for _, w := range append(tt.wantLog, "shutting down", "stopped") {
				if !strings.Contains(logText, w) {
					t.Errorf("log does not contain %q", w)
				}
			}
			if strings.Contains(logText, "no authentication") {
				t.Errorf("loopback bind logged the no-auth warning")
			}
			if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				t.Errorf("%s still accepts connections after run returned", addr)
			}
		})
	}
}

type heldAnswer struct {
	env envelope
	err error
}

// waitForMetric polls GET /metrics until a line of it is exactly line.
func waitForMetric(addr, line string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for {
		text, err := getText(addr, "/metrics", "")
		if err == nil && slices.Contains(strings.Split(text, "\n"), line) {
			return nil
		}
		last = fmt.Sprintf("%v %.300q", err, text)
		if time.Now().After(deadline) {
			return fmt.Errorf("no metric line %q within %s (last: %s)", line, within, last)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}

// getText sends a GET with an optional bearer token and returns the body;
// a status other than 200 is an error.
func getText(addr, path, token string) (string, error) {
	status, body, err := request(addr, "GET", path, "", token)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return body, fmt.Errorf("GET %s: status %d", path, status)
	}
	return body, nil
}

// request sends one request with an optional bearer token.
func request(addr, method, path, body, token string) (status int, answer string, err error) {
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw), err
}

func TestIsLoopback(t *testing.T) {
	tests := []struct {
		ip   string
		want bool
	}{
		{"127.0.0.1", true},
		{"127.0.0.53", true},
		{"::1", true},
		{"0.0.0.0", false},
		{"::", false},
		{"192.168.1.10", false},
	}
	for _, tt := range tests {
		addr := &net.TCPAddr{IP: net.ParseIP(tt.ip), Port: 9277}
		if got := isLoopback(addr); got != tt.want {
			t.Errorf("isLoopback(%s) = %v, want %v", addr, got, tt.want)
		}
	}
}

// startRun runs the server with args in the background until the test ends
// and returns its address and logs.
func startRun(t *testing.T, args ...string) (addr string, logs *logSink) {
	t.Helper()
	logs = newLogSink(t)
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx, args, io.Discard, logs) }()
	returned := false
	t.Cleanup(func() {
		stop()
		if returned {
			return
		}
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("run: %v", err)
			}
		case <-time.After(20 * time.Second):
			t.Error("run did not return within 20s of shutdown")
		}
	})
	addr, err := logs.waitFor(listeningText, 20*time.Second)
	if err != nil {
		stop()
		returned = true
		t.Fatalf("%v (run returned %v)", err, <-done)
	}
	return addr, logs
}

const (
	confToken = "conf-token-0123456789abcdef"
	envToken  = "env-token-0123456789abcdef"
)

// The operational settings, end to end through run: auth from the conf and
// from the environment, metrics_auth, the probes and the metrics.
func TestRunOperations(t *testing.T) {
	type call struct {
		method, path, body, token string
		wantStatus                int
		wantText                  []string // substrings of the answer
	}
	push := `{"topic":"mail","id":"j1","ttr":30,"body":"secret-body"}`
	tests := []struct {
		name    string
		conf    []string
		env     string // DQ_AUTH_TOKEN; "" leaves it unset
		calls   []call
		wantLog []string
	}{
		{
			name: "no token: everything open",
			calls: []call{
				{"POST", "/push", push, "", 200, []string{`"code":0`}},
				{"GET", "/healthz", "", "", 200, []string{`"code":0`}},
				{"GET", "/readyz", "", "", 200, []string{`"message":"ready"`}},
				{"GET", "/metrics", "", "", 200, []string{
					`delayqueue_http_requests_total{endpoint="/push",result="ok"} 1`,
					`delayqueue_jobs_total{event="pushed",topic="mail"} 1`,
					`delayqueue_held_pops 0`,
					`delayqueue_redis_pool_in_use`,
				}},
			},
		},
		{
			name: "token in the conf",
			conf: []string{"auth_token = " + confToken},
			calls: []call{
				{"POST", "/push", push, "", 401, []string{`"code":1`, "authorization required"}},
				{"POST", "/push", push, envToken, 401, []string{`"code":1`, "invalid token"}},
				{"POST", "/push", push, confToken, 200, []string{`"code":0`}},
				{"POST", "/get", `{"id":"j1"}`, confToken, 200, []string{`"id":"j1"`}},
				{"GET", "/healthz", "", "", 200, []string{`"code":0`}},
				{"GET", "/readyz", "", "", 200, []string{`"code":0`}},
				{"GET", "/ui/", "", "", 200, []string{"<html", "<script"}},
				{"GET", "/metrics", "", "", 200, []string{
					`delayqueue_http_requests_total{endpoint="/push",result="error"} 2`,
					`delayqueue_http_requests_total{endpoint="/push",result="ok"} 1`,
				}},
			},
		},
		{
			name: "the environment wins over the conf",
			conf: []string{"auth_token = " + confToken},
			env:  envToken,
			calls: []call{
				{"POST", "/push", push, confToken, 401, []string{"invalid token"}},
				{"POST", "/push", push, envToken, 200, []string{`"code":0`}},
			},
			wantLog: []string{"variable=DQ_AUTH_TOKEN"},
		},
		{
			name: "the environment alone",
			env:  envToken,
			calls: []call{
				{"POST", "/stats", `{}`, "", 401, []string{"authorization required"}},
				{"POST", "/stats", `{}`, envToken, 200, []string{`"code":0`}},
			},
		},
		{
			name: "metrics_auth",
			conf: []string{"auth_token = " + confToken, "metrics_auth = true"},
			calls: []call{
				{"GET", "/metrics", "", "", 401, []string{"authorization required"}},
				{"GET", "/metrics", "", confToken, 200, []string{`delayqueue_http_requests_total{endpoint="/metrics",result="error"} 1`}},
				{"GET", "/healthz", "", "", 200, []string{`"code":0`}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("DQ_AUTH_TOKEN", tt.env)
			}
			conf := append([]string{"bind_address = 127.0.0.1:0"}, tt.conf...)
			addr, logs := startRun(t, "-embedded", "-c", writeConf(t, conf...))
			for _, c := range tt.calls {
				status, answer, err := request(addr, c.method, c.path, c.body, c.token)
				if err != nil {
					t.Fatal(err)
				}
				if status != c.wantStatus {
					t.Fatalf("%s %s (token %q): status %d %s, want %d", c.method, c.path, c.token, status, answer, c.wantStatus)
				}
				for _, w := range c.wantText {
					if !strings.Contains(answer, w) {
						t.Errorf("%s %s: answer does not contain %q:\n%s", c.method, c.path, w, answer)
					}
				}
			}
			logText := logs.String()
			for _, w := range tt.wantLog {
				if !strings.Contains(logText, w) {
					t.Errorf("log does not contain %q", w)
				}
			}
			for _, secret := range []string{confToken, envToken, "secret-body"} {
				if strings.Contains(logText, secret) {
					t.Errorf("log contains %q", secret)
				}
			}
		})
	}
}

// Beyond max_held_pops a pop is refused at once with a message naming the
// setting; the held one is unaffected.
func TestRunMaxHeldPops(t *testing.T) {
	addr, _ := startRun(t, "-embedded", "-c", writeConf(t, "bind_address = 127.0.0.1:0", "max_held_pops = 1"))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan heldAnswer, 1)
	go func() {
		env, err := postContext(ctx, addr, "/pop", `{"topic":"slow","timeout":30}`)
		held <- heldAnswer{env, err}
	}()
	if err := waitForMetric(addr, "delayqueue_held_pops 1", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	env := post(t, addr, "/pop", `{"topic":"other","timeout":30}`)
	want := "too many held pops on this server (max_held_pops = 1), try again or another server"
	if env.Code != 1 || env.Message != want {
		t.Fatalf("second pop: %+v, want code 1 %q", env, want)
	}
	if elapsed := time.Since(start); elapsed > 10*time.Second {
		t.Errorf("the refusal took %s: it must not hold", elapsed)
	}
	// The held pop still gets a job pushed to its topic.
	if env := post(t, addr, "/push", `{"topic":"slow","id":"late","ttr":5}`); env.Code != 0 {
		t.Fatalf("push: %+v", env)
	}
	select {
	case answer := <-held:
		if answer.err != nil || answer.env.Code != 0 || !strings.Contains(string(answer.env.Data), `"id":"late"`) {
			t.Fatalf("held pop: %+v %v", answer.env, answer.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held pop did not get the job")
	}
}

// A bad token from the environment stops the start, naming the variable
// but not the value.
func TestRunRejectsBadEnvToken(t *testing.T) {
	t.Setenv("DQ_AUTH_TOKEN", "bad env secret with spaces")
	_, _, err := runShort(t, "-embedded", "-c", writeConf(t, "bind_address = 127.0.0.1:0"))
	if err == nil || !strings.Contains(err.Error(), "DQ_AUTH_TOKEN") || strings.Contains(err.Error(), "bad env secret") {
		t.Fatalf("run error = %v, want one naming DQ_AUTH_TOKEN without the value", err)
	}
}

// /healthz stays 200 while Redis is down; /readyz follows Redis, and
// recovers once it is back (scripts loaded again into the restarted
// server).
func TestRunProbesFollowRedis(t *testing.T) {
	srv := redistest.Start(t)
	addr, _ := startRun(t, "-c", writeConf(t, "bind_address = 127.0.0.1:0", "redis.host = "+srv.Addr,
		"redis.connect_timeout = 500"))
	probe := func(path string) (int, string) {
		t.Helper()
		status, answer, err := request(addr, "GET", path, "", "")
		if err != nil {
			t.Fatal(err)
		}
		return status, answer
	}
	if status, answer := probe("/readyz"); status != 200 {
		t.Fatalf("readyz with redis up: %d %s", status, answer)
	}
	srv.Stop()
	if status, answer := probe("/readyz"); status != 503 || !strings.Contains(answer, `"code":1`) ||
		!strings.Contains(answer, "not ready: redis unavailable") {
		t.Fatalf("readyz with redis stopped: %d %s", status, answer)
	}
	if status, answer := probe("/healthz"); status != 200 {
		t.Fatalf("healthz with redis stopped: %d %s", status, answer)
	}
	srv.Restart(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, answer := probe("/readyz")
		if status == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz after redis restarted: %d %s", status, answer)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	// The scripts are back: a push works at once.
	if env := post(t, addr, "/push", `{"topic":"t","id":"after-restart","ttr":5}`); env.Code != 0 {
		t.Fatalf("push after restart: %+v", env)
	}
}

// debug_addr serves pprof on its own listener, never on the API's.
func TestRunDebugListener(t *testing.T) {
	addr, logs := startRun(t, "-embedded", "-c", writeConf(t, "bind_address = 127.0.0.1:0", "debug_addr = 127.0.0.1:0"))
	debugAddr, err := logs.waitFor(regexp.MustCompile(`msg="debug listener \(pprof\)" addr=(\S+)`), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if text, err := getText(debugAddr, "/debug/pprof/cmdline", ""); err != nil || !strings.Contains(text, "delay-queue") {
		t.Fatalf("GET /debug/pprof/cmdline on debug_addr: %v %q", err, text)
	}
	if text, err := getText(debugAddr, "/debug/pprof/", ""); err != nil || !strings.Contains(text, "goroutine") {
		t.Fatalf("GET /debug/pprof/ on debug_addr: %v %.200q", err, text)
	}
	if status, _, err := request(addr, "GET", "/debug/pprof/", "", ""); err != nil || status != 404 {
		t.Fatalf("GET /debug/pprof/ on bind_address: %d %v, want 404", status, err)
	}
	if strings.Contains(logs.String(), "debug_addr is not a loopback address") {
		t.Error("a loopback debug_addr logged the warning")
	}
}

func TestExposedWithoutAuth(t *testing.T) {
	tests := []struct {
		ip    string
		token string
		want  bool
	}{
		{"127.0.0.1", "", false},
		{"::1", "", false},
		{"0.0.0.0", "", true},
		{"::", "", true},
		{"192.168.1.10", "", true},
		{"0.0.0.0", confToken, false},
		{"127.0.0.1", confToken, false},
	}
	for _, tt := range tests {
		addr := &net.TCPAddr{IP: net.ParseIP(tt.ip), Port: 9277}
		if got := exposedWithoutAuth(addr, tt.token); got != tt.want {
			t.Errorf("exposedWithoutAuth(%s, token %v) = %v, want %v", addr, tt.token != "", got, tt.want)
		}
	}
}

// Held pops whose clients hang up are let go at once: the gauge drops to
// zero and a job pushed afterwards is delivered to the next live consumer,
// not claimed for a departed one. Requests net/http serves (chunked,
// HTTP/1.0) work on the same port as the plain ones.
func TestRunHeldPopsOfDepartedClients(t *testing.T) {
	addr, _ := startRun(t, "-embedded", "-c", writeConf(t, "bind_address = 127.0.0.1:0"))
	const waiters = 5
	body := `{"topic":"gone","timeout":30}`
	var conns []net.Conn
	for range waiters {
		c := dialRaw(t, addr)
		raw := fmt.Sprintf("POST /pop HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", addr, len(body), body)
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	if err := waitForMetric(addr, fmt.Sprintf("delayqueue_held_pops %d", waiters), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	for _, c := range conns {
		c.Close()
	}
	if err := waitForMetric(addr, "delayqueue_held_pops 0", 10*time.Second); err != nil {
		t.Fatalf("the server kept pops whose clients left: %v", err)
	}

	// Pushed in chunks (net/http's side of the port), popped by a live
	// consumer on the first attempt.
	c := dialRaw(t, addr)
	push := `{"topic":"gone","id":"after","ttr":60}`
	raw := fmt.Sprintf("POST /push HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", addr, len(push), push)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(answer), `"code":0`) {
		t.Fatalf("chunked push: %s", answer)
	}
	env := post(t, addr, "/pop", `{"topic":"gone","timeout":5}`)
	if env.Code != 0 || !strings.Contains(string(env.Data), `"id":"after"`) || !strings.Contains(string(env.Data), `"attempts":1`) {
		t.Fatalf("pop after the waiters left: %+v, want job after on its first attempt", env)
	}

	// HTTP/1.0, which net/http answers and then closes.
	c10 := dialRaw(t, addr)
	get := `{"id":"after"}`
	if _, err := fmt.Fprintf(c10, "POST /get HTTP/1.0\r\nContent-Length: %d\r\n\r\n%s", len(get), get); err != nil {
		t.Fatal(err)
	}
	all, err := io.ReadAll(c10)
	if err != nil || !strings.HasPrefix(string(all), "HTTP/1.0 200") || !strings.Contains(string(all), `"id":"after"`) {
		t.Fatalf("HTTP/1.0 get: %q %v", all, err)
	}
}

// dialRaw opens a TCP connection to addr for hand-written requests, with a
// 10 s deadline; the test's end closes it.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c
}

// The engine's advice to run "delay-queue -c <conf> ..." names the config
// file the process was started with, quoted when it needs it, or drops -c
// when it was started without one.
func TestConfPathErrorNamesTheConfig(t *testing.T) {
	t.Parallel()
	base := fmt.Errorf("%w: run delay-queue -c <conf> -repartition 6", errors.New("layout mismatch"))
	for _, tc := range []struct {
		path, want string
	}{
		{"/etc/dq.conf", "layout mismatch: run delay-queue -c /etc/dq.conf -repartition 6"},
		{"my dq.conf", `layout mismatch: run delay-queue -c "my dq.conf" -repartition 6`},
		{"", "layout mismatch: run delay-queue -repartition 6"},
	} {
		err := confPathError{err: base, path: tc.path}
		if err.Error() != tc.want || !errors.Is(err, base) {
			t.Errorf("path %q: %q, want %q (wrapping the engine's error)", tc.path, err.Error(), tc.want)
		}
	}
}
