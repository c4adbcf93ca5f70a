package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/gomodule/redigo/redis"
)

// newTestQueue builds a queue on r, with the key check on, and runs it
// until the test ends.
func newTestQueue(t *testing.T, r *testRedis, mutate ...func(*Options)) *Queue {
	t.Helper()
	opts := Options{BucketSize: 3, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: 30 * time.Second}
	for _, m := range mutate {
		m(&opts)
	}
	return startQueue(t, r.opts, r.queueOptions(opts), redistest.Logger(t))
}

// startQueue builds a queue reaching Redis through ro, with the key check
// on, runs it until the test ends, and returns once it serves.
func startQueue(t testing.TB, ro redisconn.Options, opts Options, logger *slog.Logger) *Queue {
	t.Helper()
	q, _ := runQueue(t, ro, opts, logger)
	return q
}

// runQueue is startQueue that also returns a stop, for a test that needs
// the queue gone before it ends; the test's end stops it too.
func runQueue(t testing.TB, ro redisconn.Options, opts Options, logger *slog.Logger) (*Queue, func()) {
	t.Helper()
	return runQueueOn(t, newClient(t, ro, logger), opts, logger)
}

// runQueueOn is runQueue on a client of the test's (a wrapper, say).
func runQueueOn(t testing.TB, rdb testClient, opts Options, logger *slog.Logger) (*Queue, func()) {
	t.Helper()
	q := newQueue(t, rdb, opts, logger)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := q.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			q.StopWaiting()
			cancel()
			<-done
		})
	}
	t.Cleanup(stop)
	select {
	case <-q.Started():
	case <-done:
		t.Fatal("Run returned before the queue started")
	case <-time.After(10 * time.Second):
		t.Fatal("the queue did not start within 10s")
	}
	return q, stop
}

// newClient connects to Redis through ro until the test ends.
func newClient(t testing.TB, ro redisconn.Options, logger *slog.Logger) *redisconn.Client {
	t.Helper()
	rdb, err := redisconn.New(ro, logger, nil)
	if err != nil {
		t.Fatalf("redisconn.New: %v", err)
	}
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// testClient is a client the tests build queues on: *redisconn.Client,
// or a wrapper of one.
type testClient interface {
	Redis
	Cluster() bool
}

// newQueue builds a queue on rdb with the key check on; running it is the
// caller's.
func newQueue(t testing.TB, rdb testClient, opts Options, logger *slog.Logger) *Queue {
	t.Helper()
	opts.CheckKeys = true
	opts.Cluster = rdb.Cluster()
	q, err := New(rdb, opts, logger)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return q
}

// unrunQueue is newQueue serving without Run: no migration and no loops,
// so that the test's own calls are the only ones.
func unrunQueue(t testing.TB, rdb testClient, opts Options, logger *slog.Logger) *Queue {
	t.Helper()
	q := newQueue(t, rdb, opts, logger)
	close(q.ready)
	return q
}

// unrunQueueOn is unrunQueue on the test's Redis with partitions
// partitions, named as the original names its buckets and queues.
func unrunQueueOn(t *testing.T, r *testRedis, partitions int) *Queue {
	t.Helper()
	opts := Options{BucketSize: partitions, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s"}
	return unrunQueue(t, r.client(t), r.queueOptions(opts), redistest.Logger(t))
}

// wakeTokens is the number of tokens in topic's wake-up list in p.
func wakeTokens(t *testing.T, q *Queue, p *partition, topic string) int {
	t.Helper()
	var n int
	if err := q.withConn(t.Context(), p.key(), func(c redis.Conn) error {
		var err error
		n, err = redis.Int(c.Do("LLEN", q.keys.wake(p.tag, topic)))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func mustPush(t *testing.T, q *Queue, job Job) {
	t.Helper()
	if job.TTR == 0 {
		job.TTR = 30 * time.Second
	}
	if _, err := q.Push(context.Background(), job); err != nil {
		t.Fatalf("push %s: %v", job.ID, err)
	}
}

func mustPop(t *testing.T, q *Queue, hold time.Duration, topics ...string) *Delivery {
	t.Helper()
	d, err := q.Pop(context.Background(), topics, hold)
	if err != nil {
		t.Fatalf("pop %v: %v", topics, err)
	}
	return d
}

func TestPushPopFinish(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		// The probes reach every partition's server (on the cluster, each
		// primary by the partition's key).
		if err := q.Ping(ctx); err != nil {
			t.Fatalf("ping: %v", err)
		}
		if err := q.Ready(ctx); err != nil {
			t.Fatalf("ready: %v", err)
		}
		mustPush(t, q, Job{Topic: "order", ID: "o1", TTR: 60 * time.Second, Body: " keep  spaces "})

		info, err := q.Get(ctx, "o1")
		if err != nil || info == nil {
			t.Fatalf("get: %v %v", info, err)
		}
		if info.State != StateReady || info.Topic != "order" || info.Body != " keep  spaces " || info.TTR != time.Minute {
			t.Fatalf("get = %+v", info)
		}
		if time.Since(info.DueAt) > 5*time.Second || time.Since(info.CreatedAt) > 5*time.Second {
			t.Fatalf("due %v created %v: not now", info.DueAt, info.CreatedAt)
		}

		d := mustPop(t, q, time.Second, "order")
		if d == nil || d.ID != "o1" || d.Body != " keep  spaces " || d.Topic != "order" || d.Attempts != 1 || d.TTR != time.Minute {
			t.Fatalf("pop = %+v", d)
		}
		info, _ = q.Get(ctx, "o1")
		if info.State != StateReserved || info.Attempts != 1 || info.LeaseUntil.Before(time.Now().Add(50*time.Second)) {
			t.Fatalf("after pop get = %+v", info)
		}
		if d := mustPop(t, q, 0, "order"); d != nil {
			t.Fatalf("second pop got %+v, want nothing", d)
		}
		if err := q.Finish(ctx, "o1"); err != nil {
			t.Fatal(err)
		}
		if info, _ := q.Get(ctx, "o1"); info != nil {
			t.Fatalf("after finish get = %+v", info)
		}
		if err := q.Finish(ctx, "unknown"); err != nil {
			t.Fatalf("finish unknown: %v", err)
		}
		assertNoTraces(t, r, "order", "o1")
	})
}

func TestBodiesRoundTrip(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		binary := make([]byte, 300)
		for i := range binary {
			binary[i] = byte(i)
		}
		for _, size := range []int{0, 1, 63, 64, 65, 128, 6400, 6401, 100_000} {
			body := strings.Repeat("é✓x", size)[:size]
			if size == 300 {
				body = string(binary)
			}
			id := fmt.Sprintf("body-%d", size)
			mustPush(t, q, Job{Topic: "bodies", ID: id, Body: body})
			info, err := q.Get(context.Background(), id)
			if err != nil || info == nil || info.Body != body {
				t.Fatalf("size %d: get body mismatch (%v)", size, err)
			}
			d := mustPop(t, q, time.Second, "bodies")
			if d == nil || d.ID != id || d.Body != body {
				t.Fatalf("size %d: pop body mismatch", size)
			}
		}
	})
}

func TestDelayedJobIsNeverEarly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		start := time.Now()
		mustPush(t, q, Job{Topic: "later", ID: "d1", Delay: 400 * time.Millisecond})
		d := mustPop(t, q, 5*time.Second, "later")
		elapsed := time.Since(start)
		if d == nil || d.ID != "d1" {
			t.Fatalf("pop = %+v", d)
		}
		if elapsed < 400*time.Millisecond {
			t.Fatalf("delivered after %v, before its 400ms delay", elapsed)
		}
		if elapsed > 3*time.Second {
			t.Fatalf("delivered after %v: the scanner did not wake for it", elapsed)
		}
	})
}

func TestTopicsInListOrder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		mustPush(t, q, Job{Topic: "b", ID: "jb"})
		mustPush(t, q, Job{Topic: "a", ID: "ja"})
		for _, want := range []string{"ja", "jb"} {
			d := mustPop(t, q, time.Second, "a", "b")
			if d == nil || d.ID != want {
				t.Fatalf("pop a,b = %+v, want %s", d, want)
			}
		}
	})
}

func TestTTRRedelivery(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		mustPush(t, q, Job{Topic: "slow", ID: "s1", TTR: time.Second})
		// The lease starts at the claim, after this instant: the redelivery
		// can't come less than the ttr after it.
		beforePop := time.Now()
		first := mustPop(t, q, time.Second, "slow")
		if first == nil || first.Attempts != 1 {
			t.Fatalf("first pop = %+v", first)
		}
		second := mustPop(t, q, 5*time.Second, "slow")
		if second == nil || second.ID != "s1" || second.Attempts != 2 {
			t.Fatalf("redelivery = %+v", second)
		}
		if since := time.Since(beforePop); since < time.Second-5*time.Millisecond {
			t.Fatalf("redelivered %v after the pop started, before its 1s ttr", since)
		}
	})
}

func TestRePushReplaces(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		q := newTestQueue(t, r)

		// Ready, then re-pushed far in the future: the ready entry must not deliver.
		mustPush(t, q, Job{Topic: "t", ID: "r1", Body: "old"})
		mustPush(t, q, Job{Topic: "t", ID: "r1", Body: "new", Delay: time.Hour})
		if d := mustPop(t, q, 0, "t"); d != nil {
			t.Fatalf("stale ready entry delivered: %+v", d)
		}
		// Delayed, then re-pushed ready with a new body and topic: one delivery, new content.
		mustPush(t, q, Job{Topic: "t2", ID: "r1", Body: "newer"})
		d := mustPop(t, q, time.Second, "t", "t2")
		if d == nil || d.Body != "newer" || d.Topic != "t2" || d.Attempts != 1 {
			t.Fatalf("pop after re-push = %+v", d)
		}
		// Reserved, then re-pushed: lease dropped, delivery count restarts.
		mustPush(t, q, Job{Topic: "t2", ID: "r1", Body: "again"})
		d = mustPop(t, q, time.Second, "t2")
		if d == nil || d.Body != "again" || d.Attempts != 1 {
			t.Fatalf("pop after re-push of a reserved job = %+v", d)
		}
		if d := mustPop(t, q, 0, "t", "t2"); d != nil {
			t.Fatalf("extra delivery %+v", d)
		}
		// Ready twice in a row: delivered once.
		mustPush(t, q, Job{Topic: "t3", ID: "r2", Body: "a"})
		mustPush(t, q, Job{Topic: "t3", ID: "r2", Body: "b"})
		if d := mustPop(t, q, time.Second, "t3"); d == nil || d.Body != "b" {
			t.Fatalf("pop = %+v", d)
		}
		if d := mustPop(t, q, 0, "t3"); d != nil {
			t.Fatalf("duplicate delivery of a re-pushed id: %+v", d)
		}
		info, _ := q.Get(ctx, "r1")
		if info == nil || info.State != StateReserved {
			t.Fatalf("get r1 = %+v", info)
		}
	})
}

func TestDeleteInEveryState(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		q := newTestQueue(t, r)
		mustPush(t, q, Job{Topic: "del", ID: "delayed", Delay: time.Hour})
		mustPush(t, q, Job{Topic: "del", ID: "reserved"})
		if d := mustPop(t, q, time.Second, "del"); d == nil || d.ID != "reserved" {
			t.Fatalf("pop = %+v", d)
		}
		mustPush(t, q, Job{Topic: "del", ID: "ready"})
		for _, id := range []string{"delayed", "reserved", "ready", "never-existed"} {
			if err := q.Delete(ctx, id); err != nil {
				t.Fatalf("delete %s: %v", id, err)
			}
			if info, _ := q.Get(ctx, id); info != nil {
				t.Fatalf("%s still there: %+v", id, info)
			}
		}
		if d := mustPop(t, q, 0, "del"); d != nil {
			t.Fatalf("deleted job delivered: %+v", d)
		}
	})
}

func TestHeldPopsGetDistinctJobs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		const n = 40
		var wg sync.WaitGroup
		got := make(chan string, n)
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := q.Pop(context.Background(), []string{"held", "other"}, 10*time.Second)
				if err != nil {
					t.Errorf("pop: %v", err)
					return
				}
				if d != nil {
					got <- d.ID
				}
			}()
		}
		redistest.WaitFor(t, 5*time.Second, "waiters registered", func() bool { return q.waiters.anyWaiting([]string{"held"}) })
		for i := 0; i < n; i++ {
			mustPush(t, q, Job{Topic: "held", ID: fmt.Sprintf("h%d", i), Delay: time.Duration(i%3) * 100 * time.Millisecond})
		}
		wg.Wait()
		close(got)
		seen := map[string]bool{}
		for id := range got {
			if seen[id] {
				t.Fatalf("%s delivered twice", id)
			}
			seen[id] = true
		}
		if len(seen) != n {
			t.Fatalf("%d of %d held pops got a job", len(seen), n)
		}
	})
}

func TestGoneConsumerLosesNothing(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			d, _ := q.Pop(ctx, []string{"gone"}, 10*time.Second)
			if d != nil {
				t.Errorf("cancelled pop returned %+v", d)
			}
		}()
		redistest.WaitFor(t, 5*time.Second, "waiter registered", func() bool { return q.waiters.anyWaiting([]string{"gone"}) })
		cancel()
		<-done
		mustPush(t, q, Job{Topic: "gone", ID: "g1", TTR: 60 * time.Second})
		// The job must be ready at once for the next consumer, not after its ttr.
		d := mustPop(t, q, 3*time.Second, "gone")
		if d == nil || d.ID != "g1" || d.Attempts != 1 {
			t.Fatalf("pop = %+v", d)
		}
	})
}

// leavingRedis runs leave after the first call made through it once
// leave is set: a consumer that goes while its call runs in Redis.
type leavingRedis struct {
	*redisconn.Client
	leave atomic.Pointer[context.CancelFunc]
}

func (c *leavingRedis) Do(ctx context.Context, key string, f func(redis.Conn) error) error {
	err := c.Client.Do(ctx, key, f)
	if leave := c.leave.Swap(nil); leave != nil {
		(*leave)()
	}
	return err
}

// An unheld pop whose consumer leaves while its claim runs gives the job
// back at once, as a held pop does, rather than after its ttr: the next
// pop gets it, with the first delivery not counted.
func TestUnheldPopWhoseConsumerLeftGivesTheJobBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		leaving := &leavingRedis{Client: r.client(t)}
		// Not run: the pop's calls are the only ones.
		q := unrunQueue(t, leaving, r.queueOptions(Options{BucketSize: 1, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
			BlockTimeout: 30 * time.Second}), redistest.Logger(t))
		mustPush(t, q, Job{Topic: "left", ID: "l1", TTR: time.Minute})

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		leaving.leave.Store(&cancel)
		if d, err := q.Pop(ctx, []string{"left"}, 0); d != nil || !errors.Is(err, context.Canceled) {
			t.Fatalf("pop whose consumer left = %+v, %v; want nil, context.Canceled", d, err)
		}
		info, err := q.Get(context.Background(), "l1")
		if err != nil || info == nil || info.State != StateReady || info.Attempts != 0 {
			t.Fatalf("after the consumer left: %+v, %v; want l1 ready with no delivery counted", info, err)
		}
		if d := mustPop(t, q, 0, "left"); d == nil || d.ID != "l1" || d.Attempts != 1 {
			t.Fatalf("next pop = %+v, want l1 at its first attempt", d)
		}
	})
}

func TestStopWaitingAnswersHeldPops(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		errs := make(chan error, 5)
		for i := 0; i < 5; i++ {
			go func() {
				d, err := q.Pop(context.Background(), []string{"idle"}, 30*time.Second)
				if d != nil {
					err = fmt.Errorf("got job %+v", d)
				}
				errs <- err
			}()
		}
		redistest.WaitFor(t, 5*time.Second, "waiters registered", func() bool { return q.waiters.anyWaiting([]string{"idle"}) })
		q.StopWaiting()
		for i := 0; i < 5; i++ {
			select {
			case err := <-errs:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("held pop not answered after StopWaiting")
			}
		}
	})
}

// Two queues on one Redis, pushing and popping at once, deliver every job
// once: with the default 3 partitions, and with 12, where the partitions
// on one server (12 on one Redis, 4 per primary on the cluster) share 2
// single calls of a kind in flight.
func TestTwoQueuesNoDuplicates(t *testing.T) {
	t.Parallel()
	for _, partitions := range []int{3, 12} {
		t.Run(fmt.Sprintf("partitions=%d", partitions), func(t *testing.T) {
			t.Parallel()
			testTwoQueuesNoDuplicates(t, partitions)
		})
	}
}

func testTwoQueuesNoDuplicates(t *testing.T, partitions int) {
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		bucketSize := func(o *Options) { o.BucketSize = partitions }
		qa := newTestQueue(t, r, bucketSize)
		qb := newTestQueue(t, r, bucketSize)
		const n, pushers = 400, 8
		var pushing sync.WaitGroup
		for p := range pushers {
			q := qa
			if p%2 == 1 {
				q = qb
			}
			pushing.Add(1)
			go func() {
				defer pushing.Done()
				for i := p; i < n; i += pushers {
					job := Job{Topic: "shared", ID: fmt.Sprintf("j%d", i), TTR: 30 * time.Second,
						Delay: time.Duration(i%5) * 100 * time.Millisecond}
					if _, err := q.Push(context.Background(), job); err != nil {
						t.Errorf("push %s: %v", job.ID, err)
					}
				}
			}()
		}
		pushing.Wait()
		var mu sync.Mutex
		seen := map[string]int{}
		var wg sync.WaitGroup
		for c := 0; c < 8; c++ {
			q := qa
			if c%2 == 1 {
				q = qb
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					d, err := q.Pop(context.Background(), []string{"shared"}, time.Second)
					if err != nil {
						t.Errorf("pop: %v", err)
						return
					}
					if d == nil {
						return
					}
					mu.Lock()
					seen[d.ID]++
					mu.Unlock()
					if err := q.Finish(context.Background(), d.ID); err != nil {
						t.Errorf("finish: %v", err)
					}
				}
			}()
		}
		wg.Wait()
		if len(seen) != n {
			t.Fatalf("delivered %d distinct jobs of %d", len(seen), n)
		}
		for id, c := range seen {
			if c != 1 {
				t.Fatalf("%s delivered %d times", id, c)
			}
		}
	})
}

func TestBurstIsMovedInBatches(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r, func(o *Options) { o.MoveBatch = 100 })
		const n = 3000
		for i := 0; i < n; i++ {
			mustPush(t, q, Job{Topic: "burst", ID: fmt.Sprintf("b%d", i), Delay: 500 * time.Millisecond})
		}
		redistest.WaitFor(t, 20*time.Second, "burst moved to ready", func() bool {
			stats, err := q.Stats(context.Background(), "burst")
			return err == nil && stats["burst"].Ready == n && stats["burst"].Delay == 0
		})
	})
}

func TestInvalidJobs(t *testing.T) {
	t.Parallel()
	// No Redis there: the jobs are refused before any call.
	rdb := newClient(t, testRedisOptions("127.0.0.1:1"), nil)
	q := newQueue(t, rdb, Options{BucketSize: 1, BucketName: "b%d", QueueName: "q%s"}, nil)
	for _, job := range []Job{
		{Topic: "", ID: "x", TTR: time.Second},
		{Topic: "t", ID: "", TTR: time.Second},
		{Topic: "t", ID: "x", TTR: 0},
		{Topic: "t", ID: "x", TTR: MaxTTR + time.Second},
		{Topic: "t", ID: "x", TTR: time.Second, Delay: -time.Millisecond},
		{Topic: "t", ID: string([]byte{0xff}), TTR: time.Second},
		{Topic: "a,b", ID: "x", TTR: time.Second},
		{Topic: "t\x00", ID: "x", TTR: time.Second},
	} {
		if _, err := q.Push(context.Background(), job); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("push %+v: err %v, want ErrInvalidJob", job, err)
		}
	}
}

// TestRedisDownIsUnavailable stops the one Redis and starts it again: on a
// server of its own only (every test shares the cluster, so none may stop
// its nodes; a primary's failover is for the process tests).
func TestRedisDownIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "appendonly yes", "appendfsync always")
	q := newTestQueue(t, onServer(srv.Addr))
	mustPush(t, q, Job{Topic: "survive", ID: "s1", Delay: 300 * time.Millisecond})
	srv.Stop()
	_, err := q.Push(context.Background(), Job{Topic: "survive", ID: "s2", TTR: time.Second})
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("push with redis down: %v, want ErrUnavailable", err)
	}
	if _, err := q.Get(context.Background(), "s1"); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("get with redis down: %v", err)
	}
	srv.Restart(t)
	var d *Delivery
	redistest.WaitFor(t, 15*time.Second, "job pushed before the outage delivered", func() bool {
		d, err = q.Pop(context.Background(), []string{"survive"}, time.Second)
		return d != nil
	})
	if d.ID != "s1" {
		t.Fatalf("pop = %+v", d)
	}
}

// On a cluster WAIT goes to the primary that took the change; the shared
// cluster has no replicas. (miniredis has no WAIT.) Redis answered such a
// push: it is no Redis outage, neither logged nor counted as one.
func TestWaitReplicasRefusesUnreplicatedChanges(t *testing.T) {
	t.Parallel()
	forEachRealBackend(t, func(t *testing.T, r *testRedis) {
		logs := newRecordedLog(t)
		obs := &recordingObserver{counts: map[string]int{}}
		q := startQueue(t, r.opts, r.queueOptions(Options{BucketSize: 3, BucketName: "dq_bucket_%d",
			QueueName: "dq_queue_%s", BlockTimeout: 30 * time.Second, WaitReplicas: 1,
			WaitTimeout: 50 * time.Millisecond, Observer: obs}), slog.New(logs))
		// No replica is attached: the push is made but cannot be acknowledged.
		_, err := q.Push(context.Background(), Job{Topic: "w", ID: "w1", TTR: time.Second})
		if !errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("push without a replica: %v, want ErrNotReplicated", err)
		}
		// A finish waits for the replicas too: it has calls of its own
		// then, not the claims' (which never wait).
		if err := q.Finish(context.Background(), "w1"); !errors.Is(err, ErrNotReplicated) || errors.Is(err, ErrUnavailable) {
			t.Fatalf("finish without a replica: %v, want ErrNotReplicated", err)
		}
		if n := obs.get("redis-error/"); n != 0 {
			t.Errorf("redis errors counted: %d, want 0", n)
		}
		for _, line := range logs.lines(slog.LevelError) {
			t.Errorf("logged at error level: %s", line)
		}
	})
}

func TestRunStopsPromptlyWithHeldPops(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newQueue(t, r.client(t), r.queueOptions(Options{BucketSize: 1, BucketName: "b%d", QueueName: "q%s",
			ScanInterval: 30 * time.Second}), redistest.Logger(t))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { q.Run(ctx); close(done) }()
		<-q.Started()
		popped := make(chan struct{})
		go func() { q.Pop(context.Background(), []string{"idle"}, 60*time.Second); close(popped) }()
		redistest.WaitFor(t, 5*time.Second, "the dispatch loop blocked on the waiter's topic", func() bool {
			for _, l := range q.partitions[0].loops {
				l.mu.Lock()
				blocked := l.blocked
				l.mu.Unlock()
				if topics, _, _ := q.waiters.topicsOf(l.index, 0); blocked && len(topics) > 0 {
					return true
				}
			}
			return false
		})
		start := time.Now()
		q.StopWaiting()
		<-popped
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("Run did not return")
		}
		// The blocking timeout is 30 s here: only the interrupt can be this fast.
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("Run took %v to stop", took)
		}
	})
}

// Held pops get jobs first come, first served, also when several jobs
// become ready at once and one dispatch round serves several waiters.
func TestHeldPopsServedInArrivalOrder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		waiting := func() int {
			q.waiters.mu.Lock()
			defer q.waiters.mu.Unlock()
			if l := q.waiters.byTopic["fifo"]; l != nil {
				return l.Len()
			}
			return 0
		}
		const n = 5
		got := make([]chan string, n)
		for i := range n {
			got[i] = make(chan string, 1)
			go func() {
				d, err := q.Pop(ctx, []string{"fifo"}, 20*time.Second)
				switch {
				case err != nil:
					got[i] <- "error: " + err.Error()
				case d == nil:
					got[i] <- "nothing"
				default:
					got[i] <- d.ID
				}
			}()
			redistest.WaitFor(t, 5*time.Second, fmt.Sprintf("waiter %d registered", i), func() bool { return waiting() == i+1 })
		}
		push := func(ids ...string) {
			jobs := make([]Job, len(ids))
			for i, id := range ids {
				jobs[i] = Job{Topic: "fifo", ID: id, TTR: time.Minute}
			}
			if _, err := q.PushBatch(ctx, jobs); err != nil {
				t.Fatal(err)
			}
		}
		// The jobs spread over the partitions, and no order holds between
		// those: the waiters served must be the first ones, each with a job.
		served := map[string]bool{}
		push("j0", "j1", "j2")
		for i := range 3 {
			id := <-got[i]
			if !strings.HasPrefix(id, "j") || served[id] {
				t.Errorf("waiter %d got %s, want one of j0, j1, j2 not handed out yet", i, id)
			}
			served[id] = true
		}
		redistest.WaitFor(t, 5*time.Second, "the last two waiting again", func() bool { return waiting() == 2 })
		push("j3", "j4")
		for i := 3; i < n; i++ {
			id := <-got[i]
			if (id != "j3" && id != "j4") || served[id] {
				t.Errorf("waiter %d got %s, want j3 or j4 not handed out yet", i, id)
			}
			served[id] = true
		}
	})
}

// A held Pop that lists a topic twice leaves no waiter behind once it is
// served: the topic's next job goes to the next Pop, at once, with its
// first attempt. (The waiters are the process's: one backend will do.)
func TestHeldPopWithARepeatedTopicLeavesNoWaiter(t *testing.T) {
	t.Parallel()
	q := newTestQueue(t, onServer(redistest.Mini(t).Addr()))
	ctx := context.Background()
	held := make(chan *Delivery, 1)
	go func() {
		d, err := q.Pop(ctx, []string{"dup", "dup"}, 10*time.Second)
		if err != nil {
			t.Errorf("held pop: %v", err)
		}
		held <- d
	}()
	redistest.WaitFor(t, 5*time.Second, "the held pop registered", func() bool { return q.waiters.anyWaiting([]string{"dup"}) })
	mustPush(t, q, Job{Topic: "dup", ID: "first"})
	if d := <-held; d == nil || d.ID != "first" {
		t.Fatalf("held pop = %+v, want job first", d)
	}
	if q.waiters.anyWaiting([]string{"dup"}) {
		t.Errorf("a waiter of topic dup is still registered after its only Pop returned")
	}
	mustPush(t, q, Job{Topic: "dup", ID: "second"})
	if d := mustPop(t, q, 2*time.Second, "dup"); d == nil || d.ID != "second" || d.Attempts != 1 {
		info, _ := q.Get(ctx, "second")
		t.Fatalf("pop after the held pop = %+v, want job second, attempt 1; the job is %s, attempt %d", d, info.State, info.Attempts)
	}
}
