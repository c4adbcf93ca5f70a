package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/http1"
	"github.com/delay-queue/delay-queue/routers"
)

func TestParseAnswer(t *testing.T) {
	const ok = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello"
	const noContent = "HTTP/1.1 204 No Content\r\ncontent-length: 0\r\n\r\n"
	tests := []struct {
		name     string
		in       string
		wantSize int // 0: more bytes needed
		wantBody string
		wantErr  string
	}{
		{"complete", ok, len(ok), "hello", ""},
		{"complete, next one's bytes behind it", ok + "HTTP/1.1", len(ok), "hello", ""},
		{"head cut", ok[:20], 0, "", ""},
		{"body cut", ok[:len(ok)-1], 0, "", ""},
		{"1xx skipped", "HTTP/1.1 100 Continue\r\n\r\n" + ok, len(ok) + 25, "hello", ""},
		{"empty body", noContent, len(noContent), "", ""},
		{"chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 0, "", "Transfer-Encoding"},
		{"no length", "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello", 0, "", "needs a Content-Length"},
		{"close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello", 0, "", "keep-alive"},
		{"HTTP/1.0", "HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\nhello", 0, "", "status line"},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "", "Content-Length"},
		{"bad header", "HTTP/1.1 200 OK\r\nnonsense\r\n\r\n", 0, "", "header"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, size, err := parseAnswer([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseAnswer error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseAnswer: %v", err)
			}
			if size != tt.wantSize || string(a.body) != tt.wantBody {
				t.Fatalf("parseAnswer = %d bytes, body %q; want %d, %q", size, a.body, tt.wantSize, tt.wantBody)
			}
			if size > 0 && a.status/100 != 2 {
				t.Errorf("status %d", a.status)
			}
		})
	}
}

// loopServers serves handler on both stacks the loop meets: net/http, and
// the server's own (internal/http1, which answers the job paths itself).
func loopServers(t *testing.T, handler http.Handler) map[string]string {
	t.Helper()
	std := httptest.NewServer(handler)
	t.Cleanup(std.Close)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	own := &http1.Server{Handler: handler, Fallback: &http.Server{Handler: handler}, Paths: routers.JobPaths()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = own.Serve(listener)
	}()
	t.Cleanup(func() {
		own.Close()
		<-done
	})
	return map[string]string{"net/http": std.URL, "http1": "http://" + listener.Addr().String()}
}

func skipWithoutLoop(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the event-loop client needs epoll")
	}
}

// Every job pushed through the loop arrives once, and pop-finish through
// the loop pops and finishes every one of them.
func TestLoopPushesThenPopsAndFinishesEveryJob(t *testing.T) {
	skipWithoutLoop(t)
	const total, clients = 2000, 7
	queue := &fakeQueue{jobs: map[string]string{}}
	for name, url := range loopServers(t, queue) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ok, took, err := pushLoop(ctx, url, clients, total, func(i int) pushJob {
				return pushJob{Topic: "t", ID: jobID('l', i), TTR: 5, Body: "b"}
			})
			if err != nil || ok != total || took <= 0 {
				t.Fatalf("pushLoop = %d, %v, %v; want %d acknowledged", ok, took, err, total)
			}
			queue.mu.Lock()
			pushed, ready := len(queue.jobs), len(queue.ready)
			queue.mu.Unlock()
			if pushed != total || ready != total {
				t.Fatalf("the server holds %d jobs, %d ready; want %d", pushed, ready, total)
			}
			before := time.Now()
			last, err := popFinishLoop(ctx, url, "t", total, clients)
			if err != nil {
				t.Fatalf("popFinishLoop: %v", err)
			}
			if last.Before(before) {
				t.Errorf("last finish %v is before the drain began (%v)", last, before)
			}
			queue.mu.Lock()
			left, readyLeft := len(queue.jobs), len(queue.ready)
			queue.mu.Unlock()
			if left != 0 || readyLeft != 0 {
				t.Fatalf("%d jobs left unfinished, %d ready", left, readyLeft)
			}
		})
	}
}

// A server answering code 1 stops the loop after maxFailures, with the
// count and the first failure.
func TestLoopStopsAfterMaxFailures(t *testing.T) {
	skipWithoutLoop(t)
	var requests atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		requests.Add(1)
		io.WriteString(w, `{"code":1,"message":"topic is required","data":null}`)
	})
	srv := httptest.NewServer(handler)
	defer srv.Close()
	ok, _, err := pushLoop(context.Background(), srv.URL, 1, 10*maxFailures, func(i int) pushJob {
		return pushJob{ID: jobID('x', i)}
	})
	if !errors.Is(err, errCodeFailure) || ok != 0 {
		t.Fatalf("pushLoop = %d, %v; want 0 and a code 1 failure", ok, err)
	}
	if !strings.Contains(err.Error(), "50 requests failed") || requests.Load() != maxFailures {
		t.Errorf("error %q after %d requests; want it to stop at %d", err, requests.Load(), maxFailures)
	}
}

// A connection the server drops, or an answer the loop cannot frame, ends
// the loop with an error instead of hanging it.
func TestLoopFailsOnBrokenConnections(t *testing.T) {
	skipWithoutLoop(t)
	tests := []struct {
		name    string
		handler http.HandlerFunc
		wantErr string
	}{
		{"hijacked and closed", func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		}, "closed a connection"},
		{"chunked answer", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"code":0,`)
			w.(http.Flusher).Flush()
			io.WriteString(w, `"message":"ok","data":null}`)
		}, "Transfer-Encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(tt.handler)
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, _, err := pushLoop(ctx, srv.URL, 2, 10, func(i int) pushJob { return pushJob{Topic: "t", ID: jobID('x', i)} })
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("pushLoop error = %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

// A cancelled context ends a loop whose requests the server holds.
func TestLoopEndsWithItsContext(t *testing.T) {
	skipWithoutLoop(t)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	defer srv.Close()
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := popFinishLoop(ctx, srv.URL, "t", 10, 3)
		done <- err
	}()
	endsWith(t, done, context.DeadlineExceeded, "popFinishLoop, its context ended")
}

func TestDeliveredID(t *testing.T) {
	tests := []struct {
		data, want string
		wantErr    bool
	}{
		{`{"id":"p0000000000001","body":"b"}`, "p0000000000001", false},
		{`{"body":"b","id":"late"}`, "late", false},
		{`{"id":"a\"b","body":"b"}`, `a"b`, false},
		{`{"body":"b"}`, "", true},
		{`[1]`, "", true},
	}
	for _, tt := range tests {
		got, err := deliveredID([]byte(tt.data))
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("deliveredID(%s) = %q, %v; want %q, error %v", tt.data, got, err, tt.want, tt.wantErr)
		}
	}
}

// The hand-written bodies are the bytes json.Marshal writes.
func TestPayloadsMatchJSONMarshal(t *testing.T) {
	ms := int64(250)
	jobs := []pushJob{
		{Topic: "bench-ready", ID: jobID('p', 42), TTR: 30, Body: jobBody()},
		{Topic: "t", ID: "x", Delay: 3600, TTR: 1, Body: ""},
		{Topic: "t", ID: "y", TTR: 5, Body: "b", DelayMS: &ms},
		{Topic: `q"uote`, ID: `back\slash`, TTR: 5, Body: "<html> & \n\t\u2028 é \xff"},
	}
	for _, job := range jobs {
		want, err := json.Marshal(job)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendPushPayload(nil, job); string(got) != string(want) {
			t.Errorf("appendPushPayload = %s, want %s", got, want)
		}
	}
	for _, n := range []int{0, 7, 1234567890123, 12345678901234} {
		if got, want := jobID('p', n), fmt.Sprintf("%c%013d", 'p', n); got != want {
			t.Errorf("jobID(%d) = %q, want %q", n, got, want)
		}
	}
}
