package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// procOpsToken is the token the operations process test passes through the
// environment.
const procOpsToken = "proc-ops-token-0123456789abcdef"

// procRequest sends one request to a server process with an optional bearer
// token and returns the status and the body.
func procRequest(t *testing.T, s *procServer, method, path, body, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, s.baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s on %s: %v", method, path, s.name, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s on %s: read: %v", method, path, s.name, err)
	}
	return resp.StatusCode, string(raw)
}

// procWaitStatus polls a GET endpoint until it answers want.
func procWaitStatus(t *testing.T, s *procServer, path string, want int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		status, body := procRequest(t, s, "GET", path, "", "")
		if status == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s on %s: %d %s, want %d within %v", path, s.name, status, body, want, within)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// Two server processes on one Redis, the token from the environment: the
// API is locked on both, jobs cross instances, each serves its own
// metrics, the probes follow Redis through an outage (logged once each
// way), a SIGTERM leaves the other instance serving, and no log line
// carries the token.
func TestProcessOperations(t *testing.T) {
	t.Setenv("DQ_AUTH_TOKEN", procOpsToken) // inherited by the child processes
	srv := redistest.Start(t, "appendonly yes")
	a := startProcServer(t, "ops-a", srv.Addr, "redis.connect_timeout = 500")
	b := startProcServer(t, "ops-b", srv.Addr, "redis.connect_timeout = 500")

	push := `{"topic":"ops","id":"ops-1","ttr":30,"body":"ops-secret-body"}`
	if status, body := procRequest(t, a, "POST", "/push", push, ""); status != 401 || !strings.Contains(body, `"code":1`) {
		t.Fatalf("push without token on a: %d %s", status, body)
	}
	if status, body := procRequest(t, a, "POST", "/push", push, procOpsToken); status != 200 || !strings.Contains(body, `"code":0`) {
		t.Fatalf("push with token on a: %d %s", status, body)
	}
	if status, body := procRequest(t, b, "POST", "/pop", `{"topic":"ops","timeout":5}`, "wrong-token-0123456789"); status != 401 {
		t.Fatalf("pop with a wrong token on b: %d %s", status, body)
	}
	status, body := procRequest(t, b, "POST", "/pop", `{"topic":"ops","timeout":5}`, procOpsToken)
	if status != 200 || !strings.Contains(body, `"id":"ops-1"`) {
		t.Fatalf("pop with token on b: %d %s", status, body)
	}
	if status, body := procRequest(t, b, "POST", "/finish", `{"id":"ops-1"}`, procOpsToken); status != 200 || !strings.Contains(body, `"code":0`) {
		t.Fatalf("finish on b: %d %s", status, body)
	}

	// Each process counts what it handled.
	for _, check := range []struct {
		s    *procServer
		want []string
	}{
		{a, []string{`delayqueue_http_requests_total{endpoint="/push",result="error"} 1`,
			`delayqueue_http_requests_total{endpoint="/push",result="ok"} 1`,
			`delayqueue_jobs_total{event="pushed",topic="ops"} 1`}},
		{b, []string{`delayqueue_http_requests_total{endpoint="/pop",result="ok"} 1`,
			`delayqueue_jobs_total{event="delivered",topic="ops"} 1`,
			`delayqueue_jobs_total{event="finished",topic="ops"} 1`,
			`process_resident_memory_bytes`, `go_goroutines`}},
	} {
		status, text := procRequest(t, check.s, "GET", "/metrics", "", "")
		if status != 200 {
			t.Fatalf("GET /metrics on %s: %d", check.s.name, status)
		}
		for _, w := range check.want {
			if !strings.Contains(text, w) {
				t.Errorf("/metrics of %s lacks %q", check.s.name, w)
			}
		}
	}

	// Redis goes away: readiness fails, liveness does not, and the outage
	// is logged once however many requests fail.
	procWaitStatus(t, b, "/readyz", 200, 5*time.Second)
	srv.Stop()
	procWaitStatus(t, b, "/readyz", 503, 10*time.Second)
	for i := 0; i < 5; i++ {
		if status, body := procRequest(t, b, "POST", "/get", `{"id":"ops-1"}`, procOpsToken); status != 200 ||
			!strings.Contains(body, "redis unavailable") {
			t.Fatalf("get with redis down: %d %s", status, body)
		}
	}
	if status, body := procRequest(t, b, "GET", "/healthz", "", ""); status != 200 {
		t.Fatalf("healthz with redis down: %d %s", status, body)
	}
	srv.Restart(t)
	procWaitStatus(t, b, "/readyz", 200, 15*time.Second)
	if status, body := procRequest(t, b, "POST", "/get", `{"id":"ops-1"}`, procOpsToken); status != 200 || !strings.Contains(body, `"code":0`) {
		t.Fatalf("get after redis came back: %d %s", status, body)
	}

	// One instance leaves; the other keeps serving.
	a.Stop(30 * time.Second)
	if status, body := procRequest(t, b, "POST", "/stats", `{}`, procOpsToken); status != 200 || !strings.Contains(body, `"code":0`) {
		t.Fatalf("stats on b after a stopped: %d %s", status, body)
	}
	b.Stop(30 * time.Second)

	out := b.output.String()
	if n := strings.Count(out, `msg="redis is unreachable"`); n != 1 {
		t.Errorf("b logged the redis outage %d times, want once", n)
	}
	if n := strings.Count(out, `msg="redis is reachable again"`); n != 1 {
		t.Errorf("b logged the recovery %d times, want once", n)
	}
	for _, s := range []*procServer{a, b} {
		text := s.output.String()
		for _, secret := range []string{procOpsToken, "wrong-token-0123456789", "ops-secret-body"} {
			if strings.Contains(text, secret) {
				t.Errorf("the output of %s contains %q", s.name, secret)
			}
		}
		if !strings.Contains(text, "variable=DQ_AUTH_TOKEN") {
			t.Errorf("%s did not log that the token came from the environment", s.name)
		}
		if !strings.Contains(text, `msg="http request" method=POST path=/push status=401 code=1`) && s == a {
			t.Errorf("%s did not log the refused push", s.name)
		}
	}
}
