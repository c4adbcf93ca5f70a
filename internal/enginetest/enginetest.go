// Package enginetest runs the real engine for tests of the packages above
// it (HTTP, client, CLI, dashboard).
package enginetest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// Start runs a Queue with the default key names on the Redis at addr (db 1)
// until the test ends; blockTimeout is its longest pop hold.
func Start(t testing.TB, addr string, blockTimeout time.Duration, logger *slog.Logger) *delayqueue.Queue {
	t.Helper()
	redisOpts := redisOptions(blockTimeout)
	redisOpts.Addr, redisOpts.DB = addr, 1
	return StartWith(t, redisOpts, queueOptions(blockTimeout, ""), logger)
}

// StartOnCluster runs a Queue like Start's on the Redis Cluster that seeds
// (some of its nodes) belong to, with namespace in front of its key_prefix
// and bucket_name: tests that share one cluster give each queue a
// namespace of its own (redistest.SharedCluster.Namespace), so that none
// meets another's keys. "" keeps the default names.
func StartOnCluster(t testing.TB, seeds []string, namespace string, blockTimeout time.Duration, logger *slog.Logger) *delayqueue.Queue {
	t.Helper()
	redisOpts := redisOptions(blockTimeout)
	redisOpts.ClusterAddrs = seeds
	return StartWith(t, redisOpts, queueOptions(blockTimeout, namespace), logger)
}

// StartOn runs a Queue like Start's on r, a Redis from a redistest
// backend: on one server (db 1), or on a cluster with r's namespace in
// front of its key names.
func StartOn(t testing.TB, r *redistest.Redis, blockTimeout time.Duration, logger *slog.Logger) *delayqueue.Queue {
	t.Helper()
	if r.Cluster != nil {
		return StartOnCluster(t, r.Cluster.Addrs(), r.Namespace, blockTimeout, logger)
	}
	return Start(t, r.Addr, blockTimeout, logger)
}

// redisOptions are the test timeouts, with a read timeout that outlasts
// the longest pop hold.
func redisOptions(blockTimeout time.Duration) redisconn.Options {
	return redisconn.Options{MaxIdle: 10, ConnectTimeout: time.Second,
		ReadTimeout: 2*blockTimeout + 5*time.Second, WriteTimeout: 3 * time.Second}
}

// queueOptions are the default key names, namespace in front.
func queueOptions(blockTimeout time.Duration, namespace string) delayqueue.Options {
	return delayqueue.Options{
		BucketSize: 3, BucketName: namespace + "dq_bucket_%d", QueueName: "dq_queue_%s", KeyPrefix: namespace + "dq_",
		BlockTimeout: blockTimeout,
	}
}

// StartWith runs a Queue with the given options, and the key check on
// (delayqueue.Options.CheckKeys), until the test ends; it returns once the
// queue serves. At cleanup, held pops are answered, Run has returned and
// the connections are closed, after the cleanups registered later (such as
// an HTTP server's Close).
func StartWith(t testing.TB, redisOpts redisconn.Options, opts delayqueue.Options, logger *slog.Logger) *delayqueue.Queue {
	t.Helper()
	rdb, err := redisconn.New(redisOpts, logger, nil)
	if err != nil {
		t.Fatalf("redisconn.New: %v", err)
	}
	opts.CheckKeys = true
	opts.Cluster = rdb.Cluster()
	q, err := delayqueue.New(rdb, opts, logger)
	if err != nil {
		rdb.Close()
		t.Fatalf("delayqueue.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	runDone := make(chan error, 1)
	go func() { runDone <- q.Run(ctx) }()
	t.Cleanup(func() {
		q.StopWaiting()
		cancel()
		if err := <-runDone; err != nil {
			t.Errorf("queue Run: %v", err)
		}
		rdb.Close()
	})
	select {
	case <-q.Started():
	case err := <-runDone:
		t.Fatalf("queue Run returned before it served: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the queue did not serve within 10s")
	}
	return q
}
