package delayqueue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// connectivityOptions are redisconn.Options with the test timeouts and no
// address: each test says how to reach its server.
func connectivityOptions() redisconn.Options {
	return redisconn.Options{DB: 1, MaxIdle: 10, ConnectTimeout: time.Second,
		ReadTimeout: 10 * time.Second, WriteTimeout: 3 * time.Second}
}

// exerciseQueue runs a job through push, pop, finish and get on a queue
// built from ro, so that every command and script the engine uses passes
// through ro's connections.
func exerciseQueue(t *testing.T, ro redisconn.Options) {
	t.Helper()
	q := startQueue(t, ro, Options{BucketSize: 2, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: 5 * time.Second}, redistest.Logger(t))
	ctx := context.Background()
	if _, err := q.Push(ctx, Job{Topic: "conn", ID: "c1", Delay: 50 * time.Millisecond, TTR: 5 * time.Second, Body: "b"}); err != nil {
		t.Fatalf("Push: %v", err)
	}
	// The hold makes the blocking dispatch loops (Options.Dial) hand the
	// job out once the scanner moves it.
	d, err := q.Pop(ctx, []string{"conn"}, 5*time.Second)
	if err != nil || d == nil || d.ID != "c1" || d.Body != "b" {
		t.Fatalf("Pop = %+v, %v; want job c1", d, err)
	}
	if err := q.Finish(ctx, "c1"); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if info, err := q.Get(ctx, "c1"); err != nil || info != nil {
		t.Fatalf("Get after Finish = %+v, %v; want nil, nil", info, err)
	}
}

// The permissions docs/operations.md lists for the server's ACL user are
// all the engine needs: every command and script of a job's life passes.
// On one server: ACL users and TLS on every node of a cluster are the
// routing's tests (internal/redisconn), and the shared cluster's nodes
// are not reconfigured by tests.
func TestQueueWithTheDocumentedACLUser(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	admin, err := redis.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	redistest.SetACLUser(t, admin.Do, "dq", "dq-secret")
	ro := connectivityOptions()
	ro.Addr, ro.Username, ro.Password = srv.Addr, "dq", "dq-secret"
	exerciseQueue(t, ro)
}

// Every connection of the engine, the pooled ones and its blocking loops',
// works over TLS.
func TestQueueOverTLS(t *testing.T) {
	t.Parallel()
	files := redistest.WriteTLSFiles(t, "redis.test")
	srv := redistest.StartTLS(t, files)
	tlsConfig, err := redisconn.NewTLSConfig(files.CAFile, "redis.test")
	if err != nil {
		t.Fatal(err)
	}
	ro := connectivityOptions()
	ro.Addr, ro.TLS, ro.TLSConfig = srv.Addr, true, tlsConfig
	exerciseQueue(t, ro)
}

// A Redis that hangs (its process stopped: connections open, no answer)
// fails the calls sent to it after the call timeout (not the read
// timeout), and the readiness check within its own, shorter, deadline; once it answers again, so does the queue.
func TestAHungRedisFailsCallsInTime(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	ro := connectivityOptions()
	ro.Addr, ro.ReadTimeout, ro.CallTimeout = srv.Addr, time.Minute, 8*time.Second
	q := startQueue(t, ro, Options{BucketSize: 3, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: 5 * time.Second}, redistest.Logger(t))
	mustPush(t, q, Job{Topic: "hang", ID: "before", TTR: time.Minute})
	srv.Pause(t)

	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	readyErr := make(chan error, 1)
	go func() { readyErr <- q.Ready(ctx) }()
	select {
	case err := <-readyErr:
		if err == nil {
			t.Fatal("ready while Redis answers nothing")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the readiness check with a 0.5 s deadline was still waiting after 5 s (call timeout 8 s)")
	}
	pushErr := make(chan error, 1)
	go func() {
		_, err := q.Push(context.Background(), Job{Topic: "hang", ID: "during", TTR: time.Minute})
		pushErr <- err
	}()
	select {
	case err := <-pushErr:
		if !errors.Is(err, ErrUnavailable) {
			t.Fatalf("push to a hung Redis: %v, want ErrUnavailable", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a push to a hung Redis was still waiting after 30 s (call timeout 8 s)")
	}

	srv.Resume()
	redistest.WaitFor(t, 10*time.Second, "a push once Redis answers again", func() bool {
		_, err := q.Push(context.Background(), Job{Topic: "hang", ID: "after", TTR: time.Minute})
		return err == nil
	})
}
