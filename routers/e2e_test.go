package routers

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// The real engine satisfies the interface the HTTP layer needs.
var _ Queue = (*delayqueue.Queue)(nil)

// e2eBackend starts a Redis for one test and returns its address and a
// function that stops it early.
type e2eBackend struct {
	name  string
	start func(t *testing.T) (addr string, stop func())
}

func e2eBackends() []e2eBackend {
	return []e2eBackend{
		{"miniredis", func(t *testing.T) (string, func()) {
			m := redistest.Mini(t)
			return m.Addr(), m.Close
		}},
		{"redis", func(t *testing.T) (string, func()) {
			s := redistest.Start(t)
			return s.Addr, s.Stop
		}},
	}
}

// e2eServer runs the real engine on addr behind an httptest server, and
// stops both (engine first waited for) when the test ends.
func e2eServer(t *testing.T, addr string) string {
	t.Helper()
	redisOpts := delayqueue.RedisOptions{Addr: addr, DB: 1, MaxIdle: 10, ConnectTimeout: time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 3 * time.Second}
	pool := delayqueue.NewPool(redisOpts)
	q, err := delayqueue.New(pool, delayqueue.Options{
		BucketSize: 3, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: 5 * time.Second, Dial: redisOpts.Dial,
	}, testLogger(t))
	if err != nil {
		t.Fatalf("delayqueue.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- q.Run(ctx) }()
	t.Cleanup(func() {
		q.StopWaiting()
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("Run: %v", err)
		}
		pool.Close()
	})
	srv := httptest.NewServer(New(q, Options{BlockTimeout: 5 * time.Second}, testLogger(t)))
	t.Cleanup(srv.Close) // runs before the engine's cleanup
	return srv.URL
}

// post sends one request and checks the envelope.
func post(t *testing.T, url, path, body string) response {
	t.Helper()
	resp, err := http.Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read the answer: %v", path, err)
	}
	got, problem := parseEnvelope(resp.StatusCode, resp.Header, raw)
	if problem != "" {
		t.Fatalf("POST %s %s: %s", path, body, problem)
	}
	return got
}

// mustSucceed sends a request that must get code 0.
func mustSucceed(t *testing.T, url, path, body string) response {
	t.Helper()
	got := post(t, url, path, body)
	if got.status != 200 || got.code != 0 {
		t.Fatalf("POST %s %s: %d %s", path, body, got.status, got.raw)
	}
	return got
}

// e2eDelivery and e2eJob mirror the documented data shapes; decodeExactly
// fails on missing or extra fields.
type e2eDelivery struct {
	ID       string `json:"id"`
	Body     string `json:"body"`
	Topic    string `json:"topic"`
	TTR      int64  `json:"ttr"`
	Attempts int    `json:"attempts"`
}

type e2eJob struct {
	Topic        string `json:"topic"`
	ID           string `json:"id"`
	Delay        int64  `json:"delay"`
	TTR          int64  `json:"ttr"`
	Body         string `json:"body"`
	DelayMS      int64  `json:"delay_ms"`
	State        string `json:"state"`
	Attempts     int    `json:"attempts"`
	CreatedAt    int64  `json:"created_at"`
	CreatedAtMS  int64  `json:"created_at_ms"`
	MaxAttempts  int    `json:"max_attempts"`
	Retry        []int  `json:"retry"`
	LeaseUntil   int64  `json:"lease_until,omitempty"`
	LeaseUntilMS int64  `json:"lease_until_ms,omitempty"`
	DeadReason   string `json:"dead_reason,omitempty"`
	DeadAt       int64  `json:"dead_at,omitempty"`
	DeadAtMS     int64  `json:"dead_at_ms,omitempty"`
}

// decodeExactly decodes data into v, failing on fields v does not have and
// on missing fields, except those tagged omitempty (which the server leaves
// out in some states).
func decodeExactly(t *testing.T, data json.RawMessage, v any) {
	t.Helper()
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		t.Fatalf("data %s: %v", data, err)
	}
	fields := reflect.TypeOf(v).Elem()
	var want, got []string
	for i := range fields.NumField() {
		name, options, _ := strings.Cut(fields.Field(i).Tag.Get("json"), ",")
		if _, given := members[name]; options == "omitempty" && !given {
			continue
		}
		want = append(want, name)
	}
	for name := range members {
		got = append(got, name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("data fields %v, want %v: %s", got, want, data)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("data %s: %v", data, err)
	}
}

func popJob(t *testing.T, url, body string) *e2eDelivery {
	t.Helper()
	got := mustSucceed(t, url, "/pop", body)
	if string(got.data) == "null" {
		return nil
	}
	var d e2eDelivery
	decodeExactly(t, got.data, &d)
	return &d
}

func getJob(t *testing.T, url, id string) *e2eJob {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"id": id})
	got := mustSucceed(t, url, "/get", string(body))
	if string(got.data) == "null" {
		return nil
	}
	var j e2eJob
	decodeExactly(t, got.data, &j)
	return &j
}

func TestEndToEnd(t *testing.T) {
	for _, backend := range e2eBackends() {
		t.Run(backend.name, func(t *testing.T) {
			addr, stopRedis := backend.start(t)
			url := e2eServer(t, addr)

			// push, get, pop, get (reserved), finish, get (gone).
			const body = " hello, 世界 \n\u0000 "
			pushBody, _ := json.Marshal(map[string]any{"topic": " mail ", "id": "a1", "delay": 0, "ttr": 30, "body": body})
			before := time.Now()
			if got := mustSucceed(t, url, "/push", string(pushBody)); got.msg != "pushed" {
				t.Fatalf("push answered %s", got.raw)
			}
			job := getJob(t, url, "a1")
			if job == nil || job.Topic != "mail" || job.ID != "a1" || job.TTR != 30 || job.Body != body ||
				(job.State != delayqueue.StateDelay && job.State != delayqueue.StateReady) || job.Attempts != 0 {
				t.Fatalf("get after push: %+v", job)
			}
			if due := time.UnixMilli(job.DelayMS); due.Before(before.Add(-2*time.Second)) || due.After(time.Now().Add(2*time.Second)) ||
				job.Delay != job.DelayMS/1000 {
				t.Fatalf("get after push: due %v (delay %d, delay_ms %d), pushed at %v", due, job.Delay, job.DelayMS, before)
			}
			if created := time.Unix(job.CreatedAt, 0); created.Before(before.Add(-2*time.Second)) || created.After(time.Now().Add(2*time.Second)) {
				t.Fatalf("created_at %v, pushed at %v", created, before)
			}

			d := popJob(t, url, `{"topic":"other, mail","timeout":5}`)
			if want := (&e2eDelivery{ID: "a1", Body: body, Topic: "mail", TTR: 30, Attempts: 1}); !reflect.DeepEqual(d, want) {
				t.Fatalf("pop: %+v, want %+v", d, want)
			}
			if job := getJob(t, url, "a1"); job == nil || job.State != delayqueue.StateReserved || job.Attempts != 1 {
				t.Fatalf("get after pop: %+v", job)
			}
			if got := mustSucceed(t, url, "/finish", `{"id":"a1"}`); got.msg != "finished" {
				t.Fatalf("finish answered %s", got.raw)
			}
			if job := getJob(t, url, "a1"); job != nil {
				t.Fatalf("get after finish: %+v", job)
			}
			if d := popJob(t, url, `{"topic":"mail","timeout":0}`); d != nil {
				t.Fatalf("pop of an empty topic: %+v", d)
			}

			// delay_ms: never early.
			start := time.Now()
			mustSucceed(t, url, "/push", `{"topic":"mail","id":"ms","delay_ms":300,"ttr":30,"body":"x"}`)
			d = popJob(t, url, `{"topic":"mail","timeout":5}`)
			if d == nil || d.ID != "ms" {
				t.Fatalf("pop of a delay_ms job: %+v", d)
			}
			if elapsed := time.Since(start); elapsed < 300*time.Millisecond {
				t.Fatalf("a job pushed with delay_ms 300 was delivered after %v", elapsed)
			}
			mustSucceed(t, url, "/finish", `{"id":"ms"}`)

			// ttr: an unfinished job is delivered again, not before its ttr.
			mustSucceed(t, url, "/push", `{"topic":"retry","id":"r1","ttr":1,"body":"again"}`)
			first := popJob(t, url, `{"topic":"retry","timeout":5}`)
			firstAt := time.Now()
			second := popJob(t, url, `{"topic":"retry","timeout":5}`)
			if first == nil || second == nil || second.ID != "r1" || second.Attempts != 2 {
				t.Fatalf("ttr redelivery: first %+v, second %+v", first, second)
			}
			if elapsed := time.Since(firstAt); elapsed < 900*time.Millisecond {
				t.Fatalf("redelivered %v after the first delivery, ttr is 1s", elapsed)
			}
			mustSucceed(t, url, "/finish", `{"id":"r1"}`)

			// A delayed job: get shows the due time; delete removes it.
			before = time.Now()
			mustSucceed(t, url, "/push", `{"topic":"mail","id":"later","delay":100,"ttr":5,"body":"b"}`)
			job = getJob(t, url, "later")
			if job == nil || job.State != delayqueue.StateDelay ||
				job.Delay < before.Unix()+99 || job.Delay > time.Now().Unix()+101 {
				t.Fatalf("get of a delayed job: %+v (pushed at %d)", job, before.Unix())
			}
			if got := mustSucceed(t, url, "/delete", `{"id":"later"}`); got.msg != "deleted" {
				t.Fatalf("delete answered %s", got.raw)
			}
			if job := getJob(t, url, "later"); job != nil {
				t.Fatalf("get after delete: %+v", job)
			}
			// Unknown ids are code 0, as in the original.
			mustSucceed(t, url, "/delete", `{"id":"later"}`)
			mustSucceed(t, url, "/finish", `{"id":"never-pushed"}`)

			// Re-push replaces: the new body is delivered, once, counted afresh.
			mustSucceed(t, url, "/push", `{"topic":"mail","id":"re","delay":100,"ttr":30,"body":"old"}`)
			if got := mustSucceed(t, url, "/push", `{"topic":"mail","id":"re","delay":0,"ttr":30,"body":"new"}`); got.msg != "pushed, replacing the job with the same id" {
				t.Fatalf("re-push answered %s", got.raw)
			}
			d = popJob(t, url, `{"topic":"mail","timeout":5}`)
			if want := (&e2eDelivery{ID: "re", Body: "new", Topic: "mail", TTR: 30, Attempts: 1}); !reflect.DeepEqual(d, want) {
				t.Fatalf("pop after re-push: %+v, want %+v", d, want)
			}
			mustSucceed(t, url, "/finish", `{"id":"re"}`)
			if d := popJob(t, url, `{"topic":"mail","timeout":0}`); d != nil {
				t.Fatalf("a stale copy was delivered after re-push: %+v", d)
			}

			// Invalid input never reaches the engine.
			if got := post(t, url, "/push", `{"topic":"a,b","id":"x","ttr":5}`); got.status != 200 || got.code != 1 {
				t.Fatalf("invalid push answered %d %s", got.status, got.raw)
			}

			// Redis gone: code 1 with a clear message, not a hang or a 5xx.
			stopRedis()
			for path, body := range map[string]string{
				"/push": `{"topic":"mail","id":"down","ttr":5}`, "/get": `{"id":"x"}`,
				"/finish": `{"id":"x"}`, "/delete": `{"id":"x"}`,
			} {
				if got := post(t, url, path, body); got.status != 200 || got.code != 1 || got.msg != msgRedisUnavailable {
					t.Errorf("%s with Redis stopped: %d %s", path, got.status, got.raw)
				}
			}
			// A held pop keeps waiting out its hold rather than failing at
			// once, so that consumers do not spin.
			start = time.Now()
			got := post(t, url, "/pop", `{"topic":"mail","timeout":1}`)
			if elapsed := time.Since(start); elapsed < 900*time.Millisecond || got.status != 200 {
				t.Errorf("pop with Redis stopped answered after %v: %d %s", elapsed, got.status, got.raw)
			}
		})
	}
}
