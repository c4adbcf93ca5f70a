package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

func TestPercentile(t *testing.T) {
	ms := func(vs ...int) []time.Duration {
		out := make([]time.Duration, len(vs))
		for i, v := range vs {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted
	}
	tests := []struct {
		name    string
		samples []time.Duration
		want    latencySummary
	}{
		{"empty", nil, latencySummary{}},
		{"one", ms(7), latencySummary{n: 1, min: ms(7)[0], p50: ms(7)[0], p99: ms(7)[0], max: ms(7)[0]}},
		{"negative first", ms(3, -2, 5, 1), latencySummary{n: 4, min: ms(-2)[0], p50: ms(1)[0], p99: ms(5)[0], max: ms(5)[0]}},
		{"hundred", ms(hundred...), latencySummary{n: 100, min: ms(1)[0], p50: ms(50)[0], p99: ms(99)[0], max: ms(100)[0]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := summarize(tt.samples); got != tt.want {
				t.Errorf("summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReporterLines(t *testing.T) {
	tests := []struct {
		name   string
		setRPS float64
		print  func(r *reporter)
		want   string
	}{
		{"throughput meets goal", 100000, func(r *reporter) { r.throughput("push", 30000, atLeast(0.27)) },
			"push 30000 jobs/s ratio=0.300 target>=0.27 ok\n"},
		{"throughput misses goal", 100000, func(r *reporter) { r.throughput("pop-finish", 9999.6, atLeast(0.15)) },
			"pop-finish 10000 jobs/s ratio=0.100 target>=0.15 MISS\n"},
		{"throughput without SET rate", 0, func(r *reporter) { r.throughput("push", 1234, atLeast(0.27)) },
			"push 1234 jobs/s ratio=n/a\n"},
		{"value at most", 0, func(r *reporter) { r.value("lateness-p99", 12.5, "ms", atMost(10)) },
			"lateness-p99 12.5 ms target<=10 MISS\n"},
		{"negative value", 0, func(r *reporter) { r.value("lateness-min", -0.4, "ms", atLeast(0)) },
			"lateness-min -0.4 ms target>=0 MISS\n"},
		{"value without goal", 0, func(r *reporter) { r.value("held-pops-max", 3, "ms", nil) },
			"held-pops-max 3 ms\n"},
		{"unsupported", 0, func(r *reporter) { r.unsupported("push-batch") }, "push-batch n/a unsupported\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			tt.print(&reporter{out: &out, setRPS: tt.setRPS})
			if out.String() != tt.want {
				t.Errorf("printed %q, want %q", out.String(), tt.want)
			}
		})
	}
}

func TestCountServerClients(t *testing.T) {
	server := &processSockets{local: map[netip.AddrPort]bool{
		netip.MustParseAddrPort("127.0.0.1:5"): true,
		netip.MustParseAddrPort("[::1]:9"):     true,
	}}
	mixed := "id=3 addr=127.0.0.1:5 fd=8 name= db=1 cmd=blpop\n" +
		"id=4 addr=127.0.0.1:6 fd=9 name=dq-bench db=1 cmd=client|list\n" +
		"id=5 addr=127.0.0.1:7 fd=10 name= db=1 cmd=evalsha\n" +
		"id=6 addr=[::1]:9 fd=11 name= db=1 cmd=evalsha\n"
	tests := []struct {
		name   string
		list   string
		server *processSockets
		want   int
	}{
		{"empty", "", nil, 0},
		{"only ours", "id=3 addr=127.0.0.1:5 laddr=127.0.0.1:6379 fd=8 name=dq-bench age=1 db=1 cmd=client|list\n", nil, 0},
		{"without the server's sockets, every one but ours", mixed, nil, 3},
		{"with them, only the server's", mixed, server, 2},
		{"ours is never the server's", "id=3 addr=127.0.0.1:5 name=dq-bench db=1\n", server, 0},
		{"a name that only starts like ours", "id=3 addr=127.0.0.1:5 name=dq-bench-2 db=1\n", nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := countServerClients(tt.list, tt.server); got != tt.want {
				t.Errorf("countServerClients = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestInfoField(t *testing.T) {
	info := "# Memory\r\nused_memory:1957488\r\nused_memory_human:1.87M\r\n"
	tests := []struct {
		key    string
		want   string
		wantOK bool
	}{
		{"used_memory", "1957488", true},
		{"used_memory_human", "1.87M", true},
		{"used_memory_rss", "", false},
	}
	for _, tt := range tests {
		got, ok := infoField(info, tt.key)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("infoField(%q) = %q, %v; want %q, %v", tt.key, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name    string
		status  string
		want    int64
		wantErr bool
	}{
		{"present", "Name:\tdelay-queue\nVmPeak:\t  900 kB\nVmRSS:\t   39264 kB\nThreads:\t9\n", 39264 << 10, false},
		{"missing", "Name:\tdelay-queue\n", 0, true},
		{"odd unit", "VmRSS:\t 12 MB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseVmRSS(bufio.NewScanner(strings.NewReader(tt.status)), "status")
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseVmRSS = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// fakeServer answers every request with body.
func fakeServer(t *testing.T, answer func(path string, request []byte) string) *apiClient {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		request, _ := io.ReadAll(r.Body)
		io.WriteString(w, answer(r.URL.Path, request))
	}))
	t.Cleanup(srv.Close)
	client, err := newAPIClient(clientLean, srv.URL, 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.close)
	return client
}

// The tool must tell a server without the batch forms
// (which ignores "count" and rejects {"jobs":[...]}) from one that has them.
func TestBatchShapes(t *testing.T) {
	tests := []struct {
		name        string
		answer      string
		wantErr     error
		wantPopped  int
		wantPushErr error
	}{
		{"single-job answer: count ignored", `{"code":0,"message":"ok","data":{"id":"a","body":"b","topic":"t","ttr":5,"attempts":1}}`,
			errBatchShape, 0, nil},
		{"batch answer", `{"code":0,"message":"ok","data":[{"id":"a","body":"b","topic":"t","ttr":5,"attempts":1},{"id":"c"}]}`,
			nil, 2, nil},
		{"empty batch", `{"code":0,"message":"no job ready","data":[]}`, nil, 0, nil},
		{"code 1", `{"code":1,"message":"topic is required","data":null}`, errCodeFailure, 0, errCodeFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fakeServer(t, func(string, []byte) string { return tt.answer })
			got, err := client.popBatch(context.Background(), "t", 1, 100)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("popBatch error = %v, want %v", err, tt.wantErr)
			}
			if len(got) != tt.wantPopped {
				t.Errorf("popBatch got %d jobs, want %d", len(got), tt.wantPopped)
			}
			_, err = client.pushBatch(context.Background(), []pushJob{{Topic: "t", ID: "a", TTR: 1}})
			if !errors.Is(err, tt.wantPushErr) {
				t.Errorf("pushBatch error = %v, want %v", err, tt.wantPushErr)
			}
		})
	}
}

func TestPushSendsDelayMSOnlyWhenSet(t *testing.T) {
	var requests []string
	client := fakeServer(t, func(_ string, request []byte) string {
		requests = append(requests, string(request))
		return `{"code":0,"message":"pushed","data":null}`
	})
	ctx := context.Background()
	job := pushJob{Topic: "t", ID: "a", Delay: 3, TTR: 5, Body: "x"}
	if err := client.push(ctx, job); err != nil {
		t.Fatal(err)
	}
	if err := client.push(ctx, job.withDelayMS(0)); err != nil {
		t.Fatal(err)
	}
	want := []string{
		`{"topic":"t","id":"a","delay":3,"ttr":5,"body":"x"}`,
		`{"topic":"t","id":"a","delay":3,"delay_ms":0,"ttr":5,"body":"x"}`,
	}
	for i := range want {
		if requests[i] != want[i] {
			t.Errorf("request %d = %s, want %s", i, requests[i], want[i])
		}
	}
}

func TestForEachStopsAfterMaxFailures(t *testing.T) {
	var calls atomic.Int64
	boom := errors.New("boom")
	ok, err := forEach(context.Background(), 4, 100000, func(_ context.Context, i int) error {
		calls.Add(1)
		if i%2 == 0 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error = %v, want it to wrap %v", err, boom)
	}
	// Each of the 4 workers may finish the call it is in after the limit.
	if n := calls.Load(); n > 2*maxFailures+8 {
		t.Errorf("%d calls made, want it to stop near %d failures", n, maxFailures)
	}
	if ok < 1 {
		t.Errorf("%d successes, want some", ok)
	}
}

func TestForEachRunsEveryIndexOnce(t *testing.T) {
	const total = 1000
	var seen [total]atomic.Int32
	ok, err := forEach(context.Background(), 7, total, func(_ context.Context, i int) error {
		seen[i].Add(1)
		return nil
	})
	if err != nil || ok != total {
		t.Fatalf("forEach = %d, %v; want %d, nil", ok, err, total)
	}
	for i := range seen {
		if n := seen[i].Load(); n != 1 {
			t.Fatalf("index %d ran %d times", i, n)
		}
	}
}

func TestParseProcStatCPU(t *testing.T) {
	tests := []struct {
		name    string
		stat    string
		want    float64
		wantErr bool
	}{
		{"plain", "4242 (delay-queue) S 1 4242 4242 0 -1 4194560 900 0 0 0 150 50 0 0 20 0 9 0", 2, false},
		{"name with spaces and parens", "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0", 0.07, false},
		{"short", "7 (x) R 1 7", 0, true},
		{"no name", "garbage", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseProcStatCPU(tt.stat)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("parseProcStatCPU = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_blpop:calls=5,usec=10,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=100,usec=900,usec_per_call=9.00,rejected_calls=0,failed_calls=0\r\n"
	got := parseCommandStats(info)
	want := []commandStat{{"evalsha", 100, 900}, {"blpop", 5, 10}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("parseCommandStats = %+v, want %+v", got, want)
	}
}

// fakeQueue is an in-memory server with or without the
// batch forms, enough for probeBatches.
type fakeQueue struct {
	batches bool
	mu      sync.Mutex
	jobs    map[string]string // id -> topic
	ready   []string
}

func (f *fakeQueue) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Topic string    `json:"topic"`
		ID    string    `json:"id"`
		Jobs  []pushJob `json:"jobs"`
		IDs   []string  `json:"ids"`
		Count *int      `json:"count"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fmt.Fprintf(w, `{"code":1,"message":%q,"data":null}`, err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	answer := func(data any) {
		raw, _ := json.Marshal(data)
		fmt.Fprintf(w, `{"code":0,"message":"ok","data":%s}`, raw)
	}
	fail := func() { io.WriteString(w, `{"code":1,"message":"id is required","data":null}`) }
	switch r.URL.Path {
	case "/push":
		jobs := []pushJob{{Topic: req.Topic, ID: req.ID}}
		if f.batches && req.Jobs != nil {
			jobs = req.Jobs
		}
		for _, j := range jobs {
			if j.ID == "" || j.Topic == "" {
				fail()
				return
			}
		}
		for _, j := range jobs {
			f.jobs[j.ID] = j.Topic
			f.ready = append(f.ready, j.ID)
		}
		answer(nil)
	case "/get":
		if _, ok := f.jobs[req.ID]; !ok {
			answer(nil)
			return
		}
		answer(map[string]string{"id": req.ID})
	case "/pop":
		n := 1
		if f.batches && req.Count != nil {
			n = *req.Count
		}
		var got []delivery
		for len(got) < n && len(f.ready) > 0 {
			got = append(got, delivery{ID: f.ready[0], Topic: req.Topic})
			f.ready = f.ready[1:]
		}
		switch {
		case f.batches && req.Count != nil:
			answer(got)
		case len(got) == 0:
			answer(nil)
		default:
			answer(got[0])
		}
	case "/finish":
		ids := []string{req.ID}
		if f.batches && req.IDs != nil {
			ids = req.IDs
		}
		if slices.Contains(ids, "") {
			fail()
			return
		}
		for _, id := range ids {
			delete(f.jobs, id)
		}
		answer(nil)
	}
}

func TestProbeBatches(t *testing.T) {
	redisServer := redistest.Start(t)
	tests := []struct {
		name    string
		batches bool
		want    bool
	}{
		{"server without batches", false, false},
		{"server with batches", true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(&fakeQueue{batches: tt.batches, jobs: map[string]string{}})
			t.Cleanup(srv.Close)
			var stderr bytes.Buffer
			b, err := newBench(settings{serverURL: srv.URL, httpClient: clientLean, redisAddr: redisServer.Addr, redisDB: 1, clients: 2},
				io.Discard, slog.New(slog.NewTextHandler(&stderr, nil)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(b.close)
			support, err := b.probeBatches(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got := support.push == nil; got != tt.want {
				t.Errorf("push batch supported = %v (%v), want %v", got, support.push, tt.want)
			}
			if got := support.pop == nil; got != tt.want {
				t.Errorf("pop batch supported = %v (%v), want %v", got, support.pop, tt.want)
			}
		})
	}
}

// quickEnvelope must agree with encoding/json on the server's spelling and
// leave every other spelling to it.
func TestQuickEnvelope(t *testing.T) {
	tests := []struct {
		raw    string
		wantOK bool
	}{
		{`{"code":0,"message":"ok","data":null}` + "\n", true},
		{`{"code":1,"message":"job not found","data":null}`, true},
		{`{"code":0,"message":"","data":{"id":"a","body":"}\"x"}}` + "\n", true},
		{`{"code":0,"message":"ok","data":[{"id":"a"},{"id":"b"}]}`, true},
		{`{"code":0,"message":"a \"quoted\" word","data":null}`, false},
		{`{"code": 0, "message": "ok", "data": null}`, false},
		{`{"message":"ok","code":0,"data":null}`, false},
		{`{"code":0,"message":"ok"}`, false},
		{`{"code":,"message":"ok","data":null}`, false},
		{`not json`, false},
	}
	for _, tt := range tests {
		got, ok := quickEnvelope([]byte(tt.raw))
		if ok != tt.wantOK {
			t.Errorf("quickEnvelope(%s) ok = %v, want %v", tt.raw, ok, tt.wantOK)
			continue
		}
		if !ok {
			continue
		}
		var want reply
		if err := json.Unmarshal([]byte(tt.raw), &want); err != nil {
			t.Fatalf("%s: %v", tt.raw, err)
		}
		if got.Code != want.Code || got.Message != want.Message || string(got.Data) != string(want.Data) {
			t.Errorf("quickEnvelope(%s) = %+v (data %s), want %+v (data %s)", tt.raw, got, got.Data, want, want.Data)
		}
	}
}
