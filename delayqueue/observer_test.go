package delayqueue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

type recordingObserver struct {
	mu     sync.Mutex
	counts map[string]int
}

func (r *recordingObserver) add(event, topic string, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[event+"/"+topic] += n
}

func (r *recordingObserver) get(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.counts[key]
}

func (r *recordingObserver) JobsPushed(t string, n int)       { r.add("pushed", t, n) }
func (r *recordingObserver) JobsFinished(t string, n int)     { r.add("finished", t, n) }
func (r *recordingObserver) JobsDeleted(t string, n int)      { r.add("deleted", t, n) }
func (r *recordingObserver) JobsDeadLettered(t string, n int) { r.add("dead", t, n) }
func (r *recordingObserver) LeaseExpired(t string)            { r.add("expired", t, 1) }
func (r *recordingObserver) ScanLag(time.Duration)            { r.add("scan", "", 1) }
func (r *recordingObserver) RedisError()                      { r.add("redis-error", "", 1) }
func (r *recordingObserver) LoopError(loop string)            { r.add("loop-error", loop, 1) }
func (r *recordingObserver) JobDelivered(t string, attempts int) {
	if attempts > 1 {
		r.add("redelivered", t, 1)
	}
	r.add("delivered", t, 1)
}

func TestObserverSeesEveryEvent(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		obs := &recordingObserver{counts: map[string]int{}}
		q := newTestQueue(t, r, func(o *Options) { o.Observer = obs })
		ctx := context.Background()
		mustPush(t, q, Job{Topic: "o", ID: "a"})
		mustPush(t, q, Job{Topic: "o", ID: "b", Delay: time.Hour})
		mustPush(t, q, Job{Topic: "o", ID: "c", TTR: time.Second, MaxAttempts: 2})
		mustPop(t, q, time.Second, "o")
		if err := q.Finish(ctx, "a"); err != nil {
			t.Fatal(err)
		}
		if err := q.Delete(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		mustPop(t, q, time.Second, "o")                       // c, attempt 1
		if d := mustPop(t, q, 5*time.Second, "o"); d == nil { // c again after its ttr
			t.Fatal("no redelivery")
		}
		redistest.WaitFor(t, 5*time.Second, "c dead-lettered", func() bool { return obs.get("dead/o") == 1 })
		if n, err := q.DeadDelete(ctx, "o", "c"); err != nil || n != 1 {
			t.Fatalf("dead delete of c = %d, %v", n, err)
		}
		for key, want := range map[string]int{"pushed/o": 3, "delivered/o": 3, "redelivered/o": 1,
			"finished/o": 1, "deleted/o": 2, "expired/o": 2} {
			if got := obs.get(key); got != want {
				t.Errorf("%s = %d, want %d", key, got, want)
			}
		}
		if q.HeldPops() != 0 {
			t.Errorf("held pops = %d after every pop returned", q.HeldPops())
		}
	})
}

// TestMaxHeldPops runs on miniredis only: the limit is the process's, Redis
// takes no part in it.
func TestMaxHeldPops(t *testing.T) {
	t.Parallel()
	q := newTestQueue(t, onServer(redistest.Mini(t).Addr()), func(o *Options) { o.MaxHeldPops = 1 })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Pop(ctx, []string{"idle"}, 10*time.Second)
	redistest.WaitFor(t, 5*time.Second, "one pop held", func() bool { return q.HeldPops() == 1 })
	if _, err := q.Pop(context.Background(), []string{"idle"}, time.Second); !errors.Is(err, ErrTooManyWaiters) {
		t.Fatal("a second held pop was accepted over MaxHeldPops = 1")
	}
}

// A pop that does not wait, on topics held pops of this process wait for
// (so it asks Redis nothing, leaving the jobs to them), says Redis is
// unavailable while it is, rather than "no job".
func TestAnUnwaitedPopBehindHeldOnesReportsAnOutage(t *testing.T) {
	t.Parallel()
	q := newTestQueue(t, onServer(redistest.Mini(t).Addr()))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go q.Pop(ctx, []string{"waited"}, 10*time.Second)
	redistest.WaitFor(t, 5*time.Second, "a held pop", func() bool { return q.HeldPops() == 1 })
	if d, err := q.Pop(context.Background(), []string{"waited"}, 0); d != nil || err != nil {
		t.Fatalf("pop with Redis up = %+v, %v; want no job", d, err)
	}
	q.outages.failed(q.partitions[0].key(), errors.New("connection refused"), time.Time{})
	if _, err := q.Pop(context.Background(), []string{"waited"}, 0); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("pop during an outage = %v, want ErrUnavailable", err)
	}
}
