package client_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/routers"
)

// serverBlockTimeout is the test servers' queue_block_timeout.
const serverBlockTimeout = 5 * time.Second

// backend starts a Redis for one test and returns its address.
type backend struct {
	name  string
	start func(t *testing.T) string
}

func backends() []backend {
	return []backend{
		{"miniredis", func(t *testing.T) string { return redistest.Mini(t).Addr() }},
		{"redis", func(t *testing.T) string { return redistest.Start(t).Addr }},
	}
}

// forEachBackend runs test against a fresh server on each backend.
func forEachBackend(t *testing.T, test func(t *testing.T, url string)) {
	t.Helper()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			test(t, startServer(t, b.start(t)))
		})
	}
}

// startServer runs the real engine on the Redis at addr behind an httptest
// server and returns its URL. Both stop when the test ends.
func startServer(t *testing.T, addr string) string {
	t.Helper()
	return startServerWith(t, addr, routers.Options{BlockTimeout: serverBlockTimeout})
}

// startServerWith is startServer with the HTTP layer's options.
func startServerWith(t *testing.T, addr string, opts routers.Options) string {
	t.Helper()
	logger := testLogger(t)
	q := enginetest.Start(t, addr, serverBlockTimeout, logger)
	srv := httptest.NewServer(routers.New(q, opts, logger))
	t.Cleanup(srv.Close) // runs before the engine's cleanup
	return srv.URL
}

// testLogger sends logs to t.Log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// mustPush pushes a job or fails the test.
func mustPush(t *testing.T, c *client.Client, job client.PushJob) {
	t.Helper()
	if _, err := c.Push(context.Background(), job); err != nil {
		t.Fatalf("push %s: %v", job.ID, err)
	}
}
