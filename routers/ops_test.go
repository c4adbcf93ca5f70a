package routers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

const (
	testToken  = "s3cret-token-0123456789"
	wrongToken = "wr0ng-token-9876543210"
)

// fakeMetrics stands in for the Prometheus handler: it answers a fixed
// text, or the status it is told.
type fakeMetrics struct{ status int }

func (m fakeMetrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	if m.status != 0 {
		w.WriteHeader(m.status)
	}
	fmt.Fprintln(w, "# fake metrics")
}

// authCase is one way a request can present (or not) the token.
type authCase struct {
	name      string
	header    string // the Authorization header; "" sends none
	allowed   bool
	wantMsg   string
	challenge string // the WWW-Authenticate header of the 401
}

func authCases() []authCase {
	const missing = "authorization required: send the header Authorization: Bearer <auth_token>"
	const plain = `Bearer realm="delay-queue"`
	const invalid = `Bearer realm="delay-queue", error="invalid_token"`
	return []authCase{
		{"no header", "", false, missing, plain},
		{"wrong token", "Bearer " + wrongToken, false, "invalid token", invalid},
		{"token with a suffix", "Bearer " + testToken + "x", false, "invalid token", invalid},
		{"token prefix", "Bearer " + testToken[:10], false, "invalid token", invalid},
		{"empty bearer", "Bearer ", false, missing, plain},
		{"basic scheme", "Basic " + testToken, false, missing, plain},
		{"token without scheme", testToken, false, missing, plain},
		{"right token", "Bearer " + testToken, true, "", ""},
		{"scheme in lower case", "bearer " + testToken, true, "", ""},
		{"extra spaces", "  Bearer   " + testToken + " ", true, "", ""},
	}
}

// Every API endpoint, in every form, needs the token once it is set; the
// body is not read, and the queue not called, without it.
func TestAuthLocksEveryAPIEndpoint(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.AuthToken = testToken
	for _, req := range validRequests() {
		for _, ac := range authCases() {
			t.Run(req.path+" "+req.body+"/"+ac.name, func(t *testing.T) {
				q := &fakeQueue{stats: map[string]delayqueue.TopicStats{}}
				var headers []string
				if ac.header != "" {
					headers = []string{"Authorization", ac.header}
				}
				resp := serve(t, New(q, opts, redistest.Logger(t)), "POST", req.path, req.body, headers...)
				calls := q.recorded()
				if ac.allowed {
					if resp.status != 200 || resp.code != 0 || len(calls) == 0 {
						t.Fatalf("answer %d %s with %d queue calls, want success", resp.status, resp.raw, len(calls))
					}
					return
				}
				if resp.status != 401 || resp.code != 1 || resp.msg != ac.wantMsg || string(resp.data) != "null" {
					t.Fatalf("answer %d %s, want 401 code 1 %q", resp.status, resp.raw, ac.wantMsg)
				}
				if got := resp.header.Get("WWW-Authenticate"); got != ac.challenge {
					t.Errorf("WWW-Authenticate = %q, want %q", got, ac.challenge)
				}
				if len(calls) != 0 {
					t.Errorf("queue called without the token: %+v", calls)
				}
			})
		}
	}
}

// Without a token configured, no request needs one, and a token sent anyway
// is ignored.
func TestNoTokenConfiguredLeavesTheAPIOpen(t *testing.T) {
	t.Parallel()
	h := New(&fakeQueue{}, testOptions(), redistest.Logger(t))
	for _, req := range validRequests() {
		for _, header := range []string{"", "Bearer " + wrongToken} {
			var headers []string
			if header != "" {
				headers = []string{"Authorization", header}
			}
			if resp := serve(t, h, "POST", req.path, req.body, headers...); resp.status != 200 || resp.code != 0 {
				t.Errorf("POST %s %s (Authorization %q): %d %s", req.path, req.body, header, resp.status, resp.raw)
			}
		}
	}
}

// The probes stay open with a token; /metrics is open unless metrics_auth.
func TestOpenRoutes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		metricsAuth bool
		path        string
		header      string
		wantStatus  int
	}{
		{"healthz without token", false, "/healthz", "", 200},
		{"healthz with a wrong token", false, "/healthz", "Bearer " + wrongToken, 200},
		{"readyz without token", false, "/readyz", "", 200},
		{"metrics without token", false, "/metrics", "", 200},
		{"metrics with a wrong token", false, "/metrics", "Bearer " + wrongToken, 200},
		{"metrics_auth: no token", true, "/metrics", "", 401},
		{"metrics_auth: wrong token", true, "/metrics", "Bearer " + wrongToken, 401},
		{"metrics_auth: right token", true, "/metrics", "Bearer " + testToken, 200},
		{"metrics_auth: healthz stays open", true, "/healthz", "", 200},
		{"metrics_auth: readyz stays open", true, "/readyz", "", 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := testOptions()
			opts.AuthToken = testToken
			opts.Metrics = fakeMetrics{}
			opts.MetricsAuth = tt.metricsAuth
			req := newRequest(t, "GET", tt.path, "")
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := record(New(&fakeQueue{}, opts, redistest.Logger(t)), req)
			if rec.Code != tt.wantStatus {
				t.Fatalf("GET %s: %d %s, want %d", tt.path, rec.Code, rec.Body, tt.wantStatus)
			}
			switch {
			case tt.wantStatus == 401:
				if _, problem := parseEnvelope(rec.Code, rec.Header(), rec.Body.Bytes()); problem != "" {
					t.Fatal(problem)
				}
			case tt.path == "/metrics":
				if rec.Body.String() != "# fake metrics\n" {
					t.Fatalf("GET /metrics body %q", rec.Body)
				}
			default:
				if _, problem := parseEnvelope(rec.Code, rec.Header(), rec.Body.Bytes()); problem != "" {
					t.Fatal(problem)
				}
			}
		})
	}
}

// A route marked open serves without the token while the API next to it
// needs it: the hook static pages (a dashboard) use.
func TestOpenAccessIsPerRoute(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.AuthToken = testToken
	q := &fakeQueue{}
	h := New(q, opts, redistest.Logger(t))
	if resp := serve(t, h, "GET", "/healthz", ""); resp.status != 200 || resp.code != 0 {
		t.Fatalf("open GET: %d %s", resp.status, resp.raw)
	}
	if resp := serve(t, h, "POST", "/stats", "{}"); resp.status != 401 {
		t.Fatalf("API without token: %d %s", resp.status, resp.raw)
	}
	// Without a Metrics handler there is no /metrics route.
	if resp := serve(t, h, "GET", "/metrics", ""); resp.status != 404 {
		t.Fatalf("GET /metrics without a handler: %d %s", resp.status, resp.raw)
	}
}

// Neither the right nor a wrong token shows up in the logs, at any level,
// whatever the endpoint.
func TestTokenIsNeverLogged(t *testing.T) {
	t.Parallel()
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts := testOptions()
	opts.AuthToken = testToken
	opts.Metrics = fakeMetrics{}
	opts.MetricsAuth = true
	h := New(&fakeQueue{err: delayqueue.ErrUnavailable}, opts, logger)
	paths := []string{"/push", "/pop", "/get", "/nope", "/metrics", "/healthz", "/readyz"}
	for _, path := range paths {
		for _, method := range []string{"POST", "GET"} {
			for _, token := range []string{testToken, wrongToken, "short"} {
				req := newRequest(t, method, path, `{"id":"1"}`)
				req.Header.Set("Authorization", "Bearer "+token)
				record(h, req)
			}
		}
	}
	text := logs.String()
	for _, secret := range []string{testToken, wrongToken, "Bearer", "short"} {
		if strings.Contains(text, secret) {
			t.Errorf("the log contains %q:\n%s", secret, text)
		}
	}
	if n := strings.Count(text, `msg="http request"`); n != len(paths)*2*3 {
		t.Errorf("%d request lines, want %d", n, len(paths)*2*3)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		path       string
		readyErr   error
		wantStatus int
		wantCode   int
		wantMsg    string
		wantCalls  int
	}{
		{"healthz", "/healthz", nil, 200, 0, "up", 0},
		{"healthz does not ask redis", "/healthz", delayqueue.ErrUnavailable, 200, 0, "up", 0},
		{"ready", "/readyz", nil, 200, 0, "ready", 1},
		{"redis down", "/readyz", fmt.Errorf("%w: dial tcp: connection refused", delayqueue.ErrUnavailable), 503, 1,
			"not ready: redis unavailable", 1},
		{"script error", "/readyz", errors.New("ERR unknown subcommand"), 503, 1, "not ready: redis unavailable", 1},
		{"shutting down", "/readyz", delayqueue.ErrClosed, 503, 1, "not ready: server is shutting down", 1},
	}
	for _, tt := range tests {
		for _, method := range []string{"GET", "HEAD"} {
			t.Run(tt.name+" "+method, func(t *testing.T) {
				q := &fakeQueue{opErr: map[string]error{"ready": tt.readyErr}}
				rec := record(New(q, testOptions(), redistest.Logger(t)), newRequest(t, method, tt.path, ""))
				if rec.Code != tt.wantStatus {
					t.Fatalf("%s %s: status %d, want %d", method, tt.path, rec.Code, tt.wantStatus)
				}
				if got := len(q.recorded()); got != tt.wantCalls {
					t.Errorf("%d queue calls, want %d", got, tt.wantCalls)
				}
				if method == "HEAD" {
					return
				}
				resp, problem := parseEnvelope(rec.Code, rec.Header(), rec.Body.Bytes())
				if problem != "" {
					t.Fatal(problem)
				}
				if resp.code != tt.wantCode || resp.msg != tt.wantMsg {
					t.Fatalf("answer %s, want code %d %q", resp.raw, tt.wantCode, tt.wantMsg)
				}
			})
		}
	}
}

// A ready instance whose background loops fell behind stays 200 and names
// them in the answer; fresh or idle loops leave the answer as it was.
func TestReadyzNamesStaleLoops(t *testing.T) {
	t.Parallel()
	fresh := delayqueue.LoopStatus{Loop: delayqueue.LoopDispatcher, Behind: time.Second, StaleAfter: 10 * time.Second}
	staleScanner := delayqueue.LoopStatus{Loop: delayqueue.LoopScanner, Behind: 12 * time.Second, StaleAfter: 5 * time.Second}
	staleSweeper := delayqueue.LoopStatus{Loop: delayqueue.LoopDeadSweeper, Behind: 200 * time.Second, StaleAfter: 180 * time.Second}
	tests := []struct {
		name       string
		loops      []delayqueue.LoopStatus
		readyErr   error
		wantStatus int
		wantCode   int
		wantMsg    string
		wantData   string
	}{
		{"no loops running", nil, nil, 200, 0, "ready", "null"},
		{"loops up to date", []delayqueue.LoopStatus{fresh, {Loop: delayqueue.LoopScanner, StaleAfter: 5 * time.Second}}, nil,
			200, 0, "ready", "null"},
		{"just at the threshold", []delayqueue.LoopStatus{{Loop: delayqueue.LoopScanner, Behind: 5 * time.Second, StaleAfter: 5 * time.Second}}, nil,
			200, 0, "ready", "null"},
		{"stale scanner", []delayqueue.LoopStatus{staleScanner, fresh}, nil,
			200, 0, "ready, but background loops are behind: scanner",
			`{"stale_loops":[{"loop":"scanner","seconds_behind":12,"stale_after_seconds":5}]}`},
		{"two stale loops", []delayqueue.LoopStatus{staleScanner, fresh, staleSweeper}, nil,
			200, 0, "ready, but background loops are behind: scanner, dead-sweeper",
			`{"stale_loops":[{"loop":"scanner","seconds_behind":12,"stale_after_seconds":5},` +
				`{"loop":"dead-sweeper","seconds_behind":200,"stale_after_seconds":180}]}`},
		{"redis down wins", []delayqueue.LoopStatus{staleScanner}, delayqueue.ErrUnavailable,
			503, 1, "not ready: redis unavailable", "null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := &fakeQueue{loops: tt.loops, opErr: map[string]error{"ready": tt.readyErr}}
			rec := record(New(q, testOptions(), redistest.Logger(t)), newRequest(t, "GET", "/readyz", ""))
			resp, problem := parseEnvelope(rec.Code, rec.Header(), rec.Body.Bytes())
			if problem != "" {
				t.Fatal(problem)
			}
			if resp.status != tt.wantStatus || resp.code != tt.wantCode || resp.msg != tt.wantMsg || string(resp.data) != tt.wantData {
				t.Fatalf("answer %d %s, want %d code %d %q data %s", resp.status, resp.raw, tt.wantStatus, tt.wantCode, tt.wantMsg, tt.wantData)
			}
		})
	}
}

// blockingReadyQueue's Ready waits for its context, like a Redis that
// accepts the connection and never answers.
type blockingReadyQueue struct{ fakeQueue }

func (q *blockingReadyQueue) Ready(ctx context.Context) error {
	<-ctx.Done()
	return fmt.Errorf("%w: %w", delayqueue.ErrUnavailable, ctx.Err())
}

func TestReadinessCheckIsBounded(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.ReadyTimeout = 50 * time.Millisecond
	start := time.Now()
	resp := serve(t, New(&blockingReadyQueue{}, opts, redistest.Logger(t)), "GET", "/readyz", "")
	if resp.status != 503 || resp.msg != "not ready: redis unavailable" {
		t.Fatalf("answer %d %s", resp.status, resp.raw)
	}
	if elapsed := time.Since(start); elapsed > 5*time.Second {
		t.Fatalf("readyz took %s with a 50ms timeout", elapsed)
	}
}

func TestGetRoutesRefuseOtherMethods(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.Metrics = fakeMetrics{}
	h := New(&fakeQueue{}, opts, redistest.Logger(t))
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		for _, method := range []string{"POST", "PUT", "DELETE", "CONNECT"} {
			resp := serve(t, h, method, path, "{}")
			want := fmt.Sprintf("method %s is not allowed on %s: use GET", method, path)
			if resp.status != 405 || resp.msg != want || resp.header.Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d %s (Allow %q), want 405 %q", method, path, resp.status, resp.raw, resp.header.Get("Allow"), want)
			}
		}
	}
	if resp := serve(t, h, "CONNECT", "/nope", ""); resp.status != 404 {
		t.Errorf("CONNECT on an unknown path: %d %s", resp.status, resp.raw)
	}
}

// observedRequest is one call of Options.ObserveRequest.
type observedRequest struct {
	endpoint string
	code     int
}

// The endpoint label is the route, or "unknown": a scanner probing paths
// cannot grow it.
func TestObserveRequestLabels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		method  string
		path    string
		body    string
		headers []string
		want    observedRequest
	}{
		{"push", "POST", "/push", validBodies()["/push"], nil, observedRequest{"/push", 0}},
		{"invalid push", "POST", "/push", `{}`, nil, observedRequest{"/push", 1}},
		{"nested route", "POST", "/dead/list", `{"topic":"t"}`, nil, observedRequest{"/dead/list", 0}},
		{"query string", "POST", "/get?x=1", `{"id":"1"}`, nil, observedRequest{"/get", 0}},
		{"wrong method", "GET", "/push", "", nil, observedRequest{"/push", 1}},
		{"unknown path", "POST", "/random-1234", "{}", nil, observedRequest{"unknown", 1}},
		{"unclean path", "POST", "//push", "{}", nil, observedRequest{"unknown", 1}},
		{"cross-origin", "POST", "/push", "{}", []string{"Origin", "http://evil.test"}, observedRequest{"/push", 1}},
		{"oversized body", "POST", "/pop", strings.Repeat(" ", 5000), nil, observedRequest{"/pop", 1}},
		{"healthz", "GET", "/healthz", "", nil, observedRequest{"/healthz", 0}},
		{"readyz", "GET", "/readyz", "", nil, observedRequest{"/readyz", 0}},
		{"metrics", "GET", "/metrics", "", nil, observedRequest{"/metrics", 0}},
		{"no token", "POST", "/stats", "{}", []string{"X-Token-Case", "none"}, observedRequest{"/stats", 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var mu sync.Mutex
			var got []observedRequest
			opts := testOptions()
			opts.Metrics = fakeMetrics{}
			if tt.name == "no token" {
				opts.AuthToken = testToken
			}
			opts.ObserveRequest = func(endpoint string, code int, d time.Duration) {
				mu.Lock()
				defer mu.Unlock()
				if d < 0 {
					t.Errorf("negative duration %s", d)
				}
				got = append(got, observedRequest{endpoint, code})
			}
			req := newRequest(t, tt.method, tt.path, tt.body)
			for i := 0; i+1 < len(tt.headers); i += 2 {
				req.Header.Set(tt.headers[i], tt.headers[i+1])
			}
			record(New(&fakeQueue{}, opts, redistest.Logger(t)), req)
			mu.Lock()
			defer mu.Unlock()
			if len(got) != 1 || got[0] != tt.want {
				t.Fatalf("observed %+v, want exactly %+v", got, tt.want)
			}
		})
	}
}

// A failing metrics handler counts as a failure.
func TestMetricsFailureIsObserved(t *testing.T) {
	t.Parallel()
	var got []observedRequest
	opts := testOptions()
	opts.Metrics = fakeMetrics{status: http.StatusInternalServerError}
	opts.ObserveRequest = func(endpoint string, code int, _ time.Duration) {
		got = append(got, observedRequest{endpoint, code})
	}
	rec := record(New(&fakeQueue{}, opts, redistest.Logger(t)), newRequest(t, "GET", "/metrics", ""))
	if rec.Code != 500 || len(got) != 1 || got[0] != (observedRequest{"/metrics", 1}) {
		t.Fatalf("status %d, observed %+v", rec.Code, got)
	}
}

// Every request logs at info, except probe and scrape successes (debug);
// failures carry their message.
func TestRequestLogLevels(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, path, body string
		readyErr           error
		want               string
	}{
		{"POST", "/push", validBodies()["/push"], nil, `level=INFO msg="http request" method=POST path=/push status=200 code=0`},
		{"POST", "/topics", "", nil, `level=INFO msg="http request" method=POST path=/topics status=200 code=0`},
		{"POST", "/push", "{}", nil, `level=INFO msg="http request" method=POST path=/push status=200 code=1`},
		{"GET", "/healthz", "", nil, `level=DEBUG msg="http request" method=GET path=/healthz status=200 code=0`},
		{"GET", "/metrics", "", nil, `level=DEBUG msg="http request" method=GET path=/metrics status=200 code=0`},
		{"GET", "/readyz", "", nil, `level=DEBUG msg="http request" method=GET path=/readyz status=200 code=0`},
		{"GET", "/readyz", "", delayqueue.ErrUnavailable,
			`level=INFO msg="http request" method=GET path=/readyz status=503 code=1`},
		{"POST", "/healthz", "", nil, `level=INFO msg="http request" method=POST path=/healthz status=405 code=1`},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path+" "+tt.body, func(t *testing.T) {
			var logs lockedBuffer
			logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			opts := testOptions()
			opts.Metrics = fakeMetrics{}
			q := &fakeQueue{opErr: map[string]error{"ready": tt.readyErr}}
			serveAny(t, New(q, opts, logger), tt.method, tt.path, tt.body)
			var requestLines []string
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				if strings.Contains(line, `msg="http request"`) {
					requestLines = append(requestLines, line)
				}
			}
			if len(requestLines) != 1 || !strings.Contains(requestLines[0], tt.want) {
				t.Fatalf("request lines %q, want one containing %q", requestLines, tt.want)
			}
			if strings.Contains(tt.want, "code=1") && !strings.Contains(requestLines[0], "message=") {
				t.Errorf("failure logged without its message: %s", requestLines[0])
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for the concurrent writes of a
// server's handlers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newRequest(t testing.TB, method, path, body string) *http.Request {
	t.Helper()
	return httptest.NewRequest(method, path, strings.NewReader(body))
}

func record(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// serveAny sends one request whose answer may be an envelope or /metrics
// text.
func serveAny(t testing.TB, h http.Handler, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	rec := record(h, newRequest(t, method, path, body))
	if path != "/metrics" || rec.Code != 200 {
		if _, problem := parseEnvelope(rec.Code, rec.Header(), rec.Body.Bytes()); problem != "" {
			t.Fatalf("%s %s: %s", method, path, problem)
		}
	}
	return rec
}

// fakePages stands in for the dashboard: a page at /ui/, a redirect at /ui,
// 404 for other paths.
type fakePages struct{}

func (fakePages) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/ui":
		w.Header().Set("Location", "ui/")
		w.WriteHeader(http.StatusMovedPermanently)
	case "/ui/", "/ui/app.js":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, "<!doctype html><title>dashboard</title>")
	default:
		http.Error(w, "not found", http.StatusNotFound)
	}
}

// Static pages load without the token while the API next to them needs it.
func TestPagesAreOpen(t *testing.T) {
	t.Parallel()
	tests := []struct {
		method, path string
		wantStatus   int
		wantObserved observedRequest
	}{
		{"GET", "/ui/", 200, observedRequest{"/ui/", 0}},
		{"HEAD", "/ui/", 200, observedRequest{"/ui/", 0}},
		{"GET", "/ui/app.js", 200, observedRequest{"/ui/", 0}},
		{"GET", "/ui", 301, observedRequest{"/ui", 1}},
		{"GET", "/ui/missing.png", 404, observedRequest{"/ui/", 1}},
		{"POST", "/ui/", 405, observedRequest{"/ui/", 1}},
		{"POST", "/ui/app.js", 405, observedRequest{"/ui/", 1}},
		{"POST", "/stats", 401, observedRequest{"/stats", 1}},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			var observed []observedRequest
			opts := testOptions()
			opts.AuthToken = testToken
			opts.UI = fakePages{}
			opts.ObserveRequest = func(endpoint string, code int, _ time.Duration) {
				observed = append(observed, observedRequest{endpoint, code})
			}
			rec := record(New(&fakeQueue{}, opts, redistest.Logger(t)), newRequest(t, tt.method, tt.path, "{}"))
			if rec.Code != tt.wantStatus {
				t.Fatalf("%s %s: %d %s, want %d", tt.method, tt.path, rec.Code, rec.Body, tt.wantStatus)
			}
			if len(observed) != 1 || observed[0] != tt.wantObserved {
				t.Errorf("observed %+v, want %+v", observed, tt.wantObserved)
			}
			if tt.wantStatus == 405 {
				if _, problem := parseEnvelope(rec.Code, rec.Header(), rec.Body.Bytes()); problem != "" {
					t.Fatal(problem)
				}
				if allow := rec.Header().Get("Allow"); allow != "GET, HEAD" {
					t.Errorf("Allow = %q, want GET, HEAD", allow)
				}
			}
		})
	}
	// Without a UI handler, /ui is an unknown path.
	if resp := serve(t, New(&fakeQueue{}, testOptions(), redistest.Logger(t)), "GET", "/ui/", ""); resp.status != 404 {
		t.Fatalf("GET /ui/ without pages: %d %s", resp.status, resp.raw)
	}
}
