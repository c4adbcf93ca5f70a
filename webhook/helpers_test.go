package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// TestMain lets the kill -9 test run this binary as a second dispatcher
// process.
func TestMain(m *testing.M) {
	if addr := os.Getenv(childRedisEnv); addr != "" {
		os.Exit(runChildDispatcher(addr))
	}
	os.Exit(m.Run())
}

// warnCounter passes records on to the test's output and counts lines at
// info and above by message.
type warnCounter struct {
	slog.Handler
	mu     *sync.Mutex
	counts map[string]int
}

func (h warnCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level >= slog.LevelInfo {
		h.mu.Lock()
		h.counts[r.Message]++
		h.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}

func (h warnCounter) WithAttrs(attrs []slog.Attr) slog.Handler {
	return warnCounter{h.Handler.WithAttrs(attrs), h.mu, h.counts}
}

func (h warnCounter) WithGroup(name string) slog.Handler {
	return warnCounter{h.Handler.WithGroup(name), h.mu, h.counts}
}

func (h warnCounter) count(msg string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.counts[msg]
}

func testLogger(t testing.TB) (*slog.Logger, warnCounter) {
	h := warnCounter{
		Handler: redistest.LogHandler(t, slog.LevelDebug),
		mu:      &sync.Mutex{},
		counts:  map[string]int{},
	}
	return slog.New(h), h
}

func testRedisOptions(addr string) redisconn.Options {
	return redisconn.Options{Addr: addr, MaxIdle: 10, ConnectTimeout: time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 3 * time.Second}
}

func queueOptions(ro redisconn.Options) delayqueue.Options {
	return delayqueue.Options{BucketSize: 3, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: 5 * time.Second, ScanInterval: 100 * time.Millisecond}
}

// newQueue builds a queue on addr and runs its scanners until the test
// ends.
func newQueue(t *testing.T, addr string, logger *slog.Logger) (*delayqueue.Queue, redisconn.Options) {
	t.Helper()
	ro := testRedisOptions(addr)
	return enginetest.StartWith(t, ro, queueOptions(ro), logger), ro
}

// running is a dispatcher started by startDispatcher.
type running struct {
	d      *Dispatcher
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	took   time.Duration
}

// stop cancels the dispatcher and waits for Run to return; it returns how
// long that took. Later calls return the same.
func (r *running) stop(t *testing.T) time.Duration {
	t.Helper()
	r.once.Do(func() {
		start := time.Now()
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("dispatcher Run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("dispatcher Run did not return after its context was cancelled")
		}
		r.took = time.Since(start)
	})
	return r.took
}

func startDispatcher(t *testing.T, q *delayqueue.Queue, ro redisconn.Options, opts Options, logger *slog.Logger, tweak ...func(*Dispatcher)) *running {
	t.Helper()
	d, err := New(q, opts, logger)
	if err != nil {
		t.Fatalf("webhook.New: %v", err)
	}
	for _, f := range tweak {
		f(d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// received is one call as the receiver saw it.
type received struct {
	ID, Topic, Attempt, Timestamp, Signature string
	Method, Path, Body, Host                 string
	Header                                   http.Header
	At                                       time.Time
}

// receiver is a local HTTP server that records every call and answers as
// respond says (n is the call's number for its job id, from 1).
type receiver struct {
	srv     *httptest.Server
	respond func(w http.ResponseWriter, r *http.Request, n int)

	mu       sync.Mutex
	calls    []received
	inFlight map[string]int // by Host header
	total    int
	maxTotal int
	maxHost  map[string]int
}

func newReceiver(t *testing.T, respond func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	t.Helper()
	rc := &receiver{respond: respond, inFlight: map[string]int{}, maxHost: map[string]int{}}
	rc.srv = httptest.NewServer(http.HandlerFunc(rc.serve))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) serve(w http.ResponseWriter, r *http.Request) {
	body := make([]byte, 0, 64)
	buf := make([]byte, 512)
	for {
		n, err := r.Body.Read(buf)
		body = append(body, buf[:n]...)
		if err != nil {
			break
		}
	}
	call := received{
		ID: r.Header.Get(HeaderID), Topic: r.Header.Get(HeaderTopic), Attempt: r.Header.Get(HeaderAttempt),
		Timestamp: r.Header.Get(HeaderTimestamp), Signature: r.Header.Get(HeaderSignature),
		Method: r.Method, Path: r.URL.Path, Body: string(body), Host: r.Host, Header: r.Header.Clone(), At: time.Now(),
	}
	host := strings.Split(r.Host, ":")[0]
	rc.mu.Lock()
	rc.calls = append(rc.calls, call)
	n := 0
	for _, c := range rc.calls {
		if c.ID == call.ID {
			n++
		}
	}
	rc.total++
	rc.inFlight[host]++
	rc.maxTotal = max(rc.maxTotal, rc.total)
	rc.maxHost[host] = max(rc.maxHost[host], rc.inFlight[host])
	rc.mu.Unlock()
	defer func() {
		rc.mu.Lock()
		rc.total--
		rc.inFlight[host]--
		rc.mu.Unlock()
	}()
	rc.respond(w, r, n)
}

func (rc *receiver) url(path string) string { return rc.srv.URL + path }

// port is the receiver's port, for URLs with another host name.
func (rc *receiver) port() string {
	i := strings.LastIndex(rc.srv.URL, ":")
	return rc.srv.URL[i+1:]
}

func (rc *receiver) callsFor(id string) []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	var out []received
	for _, c := range rc.calls {
		if c.ID == id {
			out = append(out, c)
		}
	}
	return out
}

func (rc *receiver) allCalls() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.calls...)
}

func (rc *receiver) inFlightNow() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.total
}

func (rc *receiver) maxima() (total int, perHost map[string]int) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	perHost = map[string]int{}
	for h, n := range rc.maxHost {
		perHost[h] = n
	}
	return rc.maxTotal, perHost
}

// fakeMetrics records observations.
type fakeMetrics struct {
	mu      sync.Mutex
	results map[string]int
}

func newFakeMetrics() *fakeMetrics { return &fakeMetrics{results: map[string]int{}} }

func (m *fakeMetrics) ObserveWebhookCall(result string, latency time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if latency < 0 {
		result = "negative latency"
	}
	m.results[result]++
}

func (m *fakeMetrics) count(result string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.results[result]
}

func (m *fakeMetrics) total() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, v := range m.results {
		n += v
	}
	return n
}

func mustPush(t *testing.T, q *delayqueue.Queue, job delayqueue.Job) {
	t.Helper()
	if job.Topic == "" {
		job.Topic = "notify"
	}
	if _, err := q.Push(context.Background(), job); err != nil {
		t.Fatalf("push %s: %v", job.ID, err)
	}
}

func mustGet(t *testing.T, q *delayqueue.Queue, id string) *delayqueue.JobInfo {
	t.Helper()
	info, err := q.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return info
}

func describe(info *delayqueue.JobInfo) string {
	if info == nil {
		return "<gone>"
	}
	return fmt.Sprintf("state=%s attempts=%d dead=%q status=%d err=%q", info.State, info.Attempts, info.DeadReason, info.LastStatus, info.LastError)
}

// answer writes a status and body.
func answer(w http.ResponseWriter, status int, body string) {
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}
