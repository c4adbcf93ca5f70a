package routers

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

func TestPopRequest(t *testing.T) {
	t.Parallel()
	manyTopics := func(n int) string {
		parts := make([]string, n)
		for i := range parts {
			parts[i] = "t" + strings.Repeat("x", i%5) + string(rune('a'+i%26)) + string(rune('a'+i/26))
		}
		return strings.Join(parts, ",")
	}
	tests := []struct {
		name       string
		body       string
		wantTopics []string
		wantHold   time.Duration
	}{
		{"one topic, default hold", `{"topic":"order"}`, []string{"order"}, 30 * time.Second},
		{"several topics trimmed, in order", `{"topic":" b , a,c "}`, []string{"b", "a", "c"}, 30 * time.Second},
		{"repeats dropped, first place kept", `{"topic":"a,b,a"}`, []string{"a", "b"}, 30 * time.Second},
		{"timeout 0 does not wait", `{"topic":"a","timeout":0}`, []string{"a"}, 0},
		{"timeout shortens the hold", `{"topic":"a","timeout":5}`, []string{"a"}, 5 * time.Second},
		{"timeout up to queue_block_timeout", `{"topic":"a","timeout":30}`, []string{"a"}, 30 * time.Second},
		{"null timeout is the default", `{"topic":"a","timeout":null}`, []string{"a"}, 30 * time.Second},
		{"100 topics", `{"topic":"` + manyTopics(100) + `"}`, strings.Split(manyTopics(100), ","), 30 * time.Second},
		{"unknown fields ignored", `{"topic":"a","ttr":"x"}`, []string{"a"}, 30 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/pop", tc.body)
			calls := q.recorded()
			if len(calls) != 1 || calls[0].op != "pop" {
				t.Fatalf("calls = %+v, want one pop", calls)
			}
			if !reflect.DeepEqual(calls[0].topics, tc.wantTopics) || calls[0].hold != tc.wantHold {
				t.Fatalf("Pop(%q, %v), want Pop(%q, %v)", calls[0].topics, calls[0].hold, tc.wantTopics, tc.wantHold)
			}
		})
	}
}

func TestPopRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body string
		want string
	}{
		{"topic missing", `{}`, "topic is required: one topic or several separated by commas"},
		{"topic blank", `{"topic":"  "}`, "topic is required: one topic or several separated by commas"},
		{"topic a number", `{"topic":1}`, "topic must be a string, got a number"},
		{"topic an array", `{"topic":["a","b"]}`, "topic must be a string, got an array"},
		{"empty part", `{"topic":"a,,b"}`, "topic 2 of 3 is required and must not be blank"},
		{"trailing comma", `{"topic":"a,"}`, "topic 2 of 2 is required and must not be blank"},
		{"leading comma", `{"topic":" ,a"}`, "topic 1 of 2 is required and must not be blank"},
		{"only a comma", `{"topic":","}`, "topic 1 of 2 is required and must not be blank"},
		{"101 topics", `{"topic":"` + strings.Repeat("a,", 100) + `a"}`, "topic lists 101 topics: at most 100 are allowed"},
		{"part too long", `{"topic":"a,` + strings.Repeat("x", 129) + `"}`, "topic 2 of 2 must be at most 128 bytes, got 129"},
		{"single topic too long", `{"topic":"` + strings.Repeat("x", 129) + `"}`, "topic must be at most 128 bytes, got 129"},
		{"part with control", `{"topic":"a,b\u0007"}`, "topic 2 of 2 must not contain control characters"},
		{"invalid UTF-8", "{\"topic\":\"a,\xff\"}", "topic must be valid UTF-8"},
		{"lone surrogate", `{"topic":"a,\ud800"}`, "topic must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},
		{"timeout above queue_block_timeout", `{"topic":"a","timeout":31}`, "timeout must be an integer between 0 and 30 (seconds, at most queue_block_timeout), got 31"},
		{"timeout negative", `{"topic":"a","timeout":-1}`, "timeout must be an integer between 0 and 30 (seconds, at most queue_block_timeout), got -1"},
		{"timeout a fraction", `{"topic":"a","timeout":0.5}`, "timeout must be an integer between 0 and 30 (seconds, at most queue_block_timeout), got 0.5"},
		{"timeout a string", `{"topic":"a","timeout":"5"}`, "timeout must be an integer between 0 and 30 (seconds, at most queue_block_timeout), got a string"},
		{"not an object", `["a"]`, "request body must be a JSON object, got an array"},
		{"data after the object", `{"topic":"a"} {}`, "request body has data after the JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/pop", tc.body)
			if resp.status != 200 || resp.code != 1 || string(resp.data) != "null" {
				t.Fatalf("answer %d %s, want 200 with code 1", resp.status, resp.raw)
			}
			if resp.msg != tc.want {
				t.Errorf("message\n got %q\nwant %q", resp.msg, tc.want)
			}
			if calls := q.recorded(); len(calls) != 0 {
				t.Errorf("queue called for an invalid request: %+v", calls)
			}
		})
	}
}

func TestPopAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		delivery *delayqueue.Delivery
		want     string
	}{
		{"a job", &delayqueue.Delivery{ID: "15", Topic: "order", Body: "<b>&\"x\"</b>", TTR: 30 * time.Second, Attempts: 2},
			`{"code":0,"message":"ok","data":{"id":"15","body":"<b>&\"x\"</b>","topic":"order","ttr":30,"attempts":2}}`},
		{"no job", nil, `{"code":0,"message":"no job ready","data":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{delivery: tc.delivery}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/pop", `{"topic":"order"}`)
			if resp.status != 200 || resp.raw != tc.want+"\n" {
				t.Fatalf("answer %d %s\nwant 200 %s", resp.status, resp.raw, tc.want)
			}
		})
	}
}

func TestPopCount(t *testing.T) {
	t.Parallel()
	a := &delayqueue.Delivery{ID: "1", Topic: "t", Body: "a", TTR: time.Second, Attempts: 1}
	b := &delayqueue.Delivery{ID: "2", Topic: "u", Body: "b", TTR: 30 * time.Second, Attempts: 4}
	tests := []struct {
		name       string
		body       string
		deliveries []*delayqueue.Delivery
		wantCount  int
		wantHold   time.Duration
		want       string
	}{
		{"count 1 still answers an array", `{"topic":"t","count":1}`, []*delayqueue.Delivery{a}, 1, 30 * time.Second,
			`{"code":0,"message":"ok","data":[{"id":"1","body":"a","topic":"t","ttr":1,"attempts":1}]}`},
		{"several jobs", `{"topic":"t,u","count":100,"timeout":2}`, []*delayqueue.Delivery{a, b}, 100, 2 * time.Second,
			`{"code":0,"message":"2 jobs","data":[{"id":"1","body":"a","topic":"t","ttr":1,"attempts":1},` +
				`{"id":"2","body":"b","topic":"u","ttr":30,"attempts":4}]}`},
		{"none: an empty array, not null", `{"topic":"t","count":5,"timeout":0}`, nil, 5, 0,
			`{"code":0,"message":"no job ready","data":[]}`},
		{"null count is the original shape", `{"topic":"t","count":null}`, nil, 0, 30 * time.Second,
			`{"code":0,"message":"no job ready","data":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{deliveries: tc.deliveries}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/pop", tc.body)
			if resp.raw != tc.want+"\n" {
				t.Fatalf("answer %s\nwant   %s", resp.raw, tc.want)
			}
			calls := q.recorded()
			wantOp := "popBatch"
			if tc.wantCount == 0 {
				wantOp = "pop"
			}
			if len(calls) != 1 || calls[0].op != wantOp || calls[0].count != tc.wantCount || calls[0].hold != tc.wantHold {
				t.Fatalf("calls = %+v, want %s count %d hold %v", calls, wantOp, tc.wantCount, tc.wantHold)
			}
		})
	}

	for body, want := range map[string]string{
		`{"topic":"t","count":0}`:     "count must be an integer between 1 and 100, got 0",
		`{"topic":"t","count":101}`:   "count must be an integer between 1 and 100, got 101",
		`{"topic":"t","count":-1}`:    "count must be an integer between 1 and 100, got -1",
		`{"topic":"t","count":"5"}`:   "count must be an integer between 1 and 100, got a string",
		`{"topic":"t","count":2.0}`:   "count must be an integer between 1 and 100, got 2.0",
		`{"topic":"t","count":[1]}`:   "count must be an integer between 1 and 100, got an array",
		`{"topic":"a,,b","count":10}`: "topic 2 of 3 is required and must not be blank",
	} {
		q := &fakeQueue{}
		resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/pop", body)
		if resp.code != 1 || resp.msg != want || string(resp.data) != "null" || len(q.recorded()) != 0 {
			t.Errorf("%s: answer %s, want code 1 %q", body, resp.raw, want)
		}
	}
}

// A client that goes away ends the hold: Pop gets the request's context.
func TestPopEndsWhenClientLeaves(t *testing.T) {
	forEachFront(t, func(t *testing.T, f front) {
		q := &fakeQueue{popStarted: make(chan context.Context, 1)}
		url := f.serve(t, q, testOptions(), redistest.Logger(t))

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, "POST", url+"/pop", strings.NewReader(`{"topic":"a"}`))
		if err != nil {
			t.Fatal(err)
		}
		clientDone := make(chan error, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				resp.Body.Close()
			}
			clientDone <- err
		}()

		var popCtx context.Context
		select {
		case popCtx = <-q.popStarted:
		case <-time.After(10 * time.Second):
			t.Fatal("Pop was not called")
		}
		if popCtx.Err() != nil {
			t.Fatal("Pop's context ended before the client left")
		}
		cancel()
		select {
		case <-popCtx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Pop's context did not end when the client left")
		}
		if err := <-clientDone; err == nil {
			t.Fatal("the canceled client got an answer")
		}
	})
}
