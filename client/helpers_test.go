package client_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/routers"
)

// serverBlockTimeout is the test servers' queue_block_timeout.
const serverBlockTimeout = 5 * time.Second

// forEachServer runs test, in parallel subtests, against a server of its
// own on each standalone backend (redistest.ForEach).
func forEachServer(t *testing.T, test func(t *testing.T, url string)) {
	t.Helper()
	redistest.ForEach(t, redistest.StandaloneBackends(), func(t *testing.T, r *redistest.Redis) {
		test(t, startServer(t, r.Addr))
	})
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
	logger := redistest.Logger(t)
	q := enginetest.Start(t, addr, serverBlockTimeout, logger)
	srv := httptest.NewServer(routers.New(q, opts, logger))
	t.Cleanup(srv.Close) // runs before the engine's cleanup
	return srv.URL
}

// mustPush pushes a job or fails the test.
func mustPush(t *testing.T, c *client.Client, job client.PushJob) {
	t.Helper()
	if _, err := c.Push(context.Background(), job); err != nil {
		t.Fatalf("push %s: %v", job.ID, err)
	}
}
