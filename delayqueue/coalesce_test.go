package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

func TestCoalescerBatchesConcurrentCalls(t *testing.T) {
	t.Parallel()
	var execs, maxBatch atomic.Int64
	release := make(chan struct{})
	c := newCoalescer(1, 50, func(int) int { return 1 }, func(_ context.Context, items []int) ([]int, error) {
		execs.Add(1)
		if int64(len(items)) > maxBatch.Load() {
			maxBatch.Store(int64(len(items)))
		}
		<-release
		out := make([]int, len(items))
		for i, v := range items {
			out[i] = v * 2
		}
		return out, nil
	})
	const n = 120
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := c.do(context.Background(), i)
			if err != nil || got != 2*i {
				t.Errorf("do(%d) = %d, %v", i, got, err)
			}
		}()
	}
	// Let the calls queue behind the first execution, then let them all run.
	redistest.WaitFor(t, 5*time.Second, "calls queued", func() bool {
		c.group.mu.Lock()
		defer c.group.mu.Unlock()
		return len(c.pending) >= n-1
	})
	close(release)
	wg.Wait()
	if execs.Load() >= n || maxBatch.Load() > 50 || maxBatch.Load() < 2 {
		t.Fatalf("%d executions for %d calls, largest batch %d (cap 50)", execs.Load(), n, maxBatch.Load())
	}
}

// A leader yields before it takes its batch: calls queued meanwhile join
// its script call instead of waiting for the next one.
func TestLeaderTakesCallsQueuedWhileItYields(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var batches []int
	c := newCoalescer(1, 50, func(int) int { return 1 }, func(_ context.Context, items []int) ([]int, error) {
		mu.Lock()
		batches = append(batches, len(items))
		mu.Unlock()
		return items, nil
	})
	const others = 5
	var wg sync.WaitGroup
	var once sync.Once
	c.yield = func() {
		once.Do(func() {
			for i := 1; i <= others; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if got, err := c.do(context.Background(), i); err != nil || got != i {
						t.Errorf("do(%d) = %d, %v", i, got, err)
					}
				}()
			}
			redistest.WaitFor(t, 5*time.Second, "the other calls queued", func() bool {
				c.group.mu.Lock()
				defer c.group.mu.Unlock()
				return len(c.pending) == 1+others
			})
		})
	}
	if got, err := c.do(context.Background(), 0); err != nil || got != 0 {
		t.Fatalf("do(0) = %d, %v", got, err)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(batches) != 1 || batches[0] != 1+others {
		t.Fatalf("script calls of %v items, want one of %d", batches, 1+others)
	}
}

// Single calls and batches each get their own slots: singleSlots script
// calls of single items at once, the next single queued behind them, and
// batches running beside them, batchSlots at a time.
func TestLanesSlotsBySize(t *testing.T) {
	t.Parallel()
	var running atomic.Int64
	entered := make(chan []int, 10)
	release := make(chan struct{})
	l := newLanes(100, func(items []int) int { return len(items) }, func(_ context.Context, calls [][]int) ([]int, error) {
		running.Add(1)
		entered <- calls[0]
		<-release
		running.Add(-1)
		return make([]int, len(calls)), nil
	})
	var wg sync.WaitGroup
	call := func(items ...int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.do(context.Background(), items); err != nil {
				t.Error(err)
			}
		}()
	}
	enters := func(what string, n int, size int) {
		t.Helper()
		for range n {
			select {
			case got := <-entered:
				if len(got) != size {
					t.Fatalf("%s: a call of %d items ran, want %d", what, len(got), size)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s did not run", what)
			}
		}
	}
	for i := range singleSlots {
		call(i)
		enters("a single call with a free slot", 1, 1)
	}
	call(99)
	redistest.WaitFor(t, 5*time.Second, "a single call queued", func() bool {
		l.single.group.mu.Lock()
		defer l.single.group.mu.Unlock()
		return len(l.single.pending) == 1
	})
	// Batches run beside the single calls (60 items each: too many to
	// share one call of at most 100).
	for range batchSlots {
		call(make([]int, 60)...)
	}
	enters("batches beside single calls", batchSlots, 60)
	if got := running.Load(); got != singleSlots+batchSlots {
		t.Fatalf("%d script calls in flight, want %d", got, singleSlots+batchSlots)
	}
	select {
	case got := <-entered:
		t.Fatalf("a call of %v ran with every slot taken", got)
	default:
	}
	close(release)
	wg.Wait()
	enters("the queued single call", 1, 1)
}

// Slots pass from leader to queued call and are never lost, whatever the
// callers do: many calls, some cancelled while queued or while handed a
// slot, all end, and every slot is free at the end.
func TestCoalescerSlotsSurviveCancellations(t *testing.T) {
	t.Parallel()
	for _, slots := range []int{1, 2} {
		var running, most atomic.Int64
		c := newCoalescer(slots, 5, func(int) int { return 1 }, func(_ context.Context, items []int) ([]int, error) {
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(time.Millisecond)
			return items, nil
		})
		c.yield = runtime.Gosched
		var wg sync.WaitGroup
		for i := range 300 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if i%3 == 0 {
					time.AfterFunc(time.Duration(i%7)*100*time.Microsecond, cancel)
				}
				got, err := c.do(ctx, i)
				if err == nil && got != i || err != nil && !errors.Is(err, context.Canceled) {
					t.Errorf("do(%d) = %d, %v", i, got, err)
				}
			}()
		}
		wg.Wait()
		c.group.mu.Lock()
		leaders, pending := c.group.leaders, len(c.pending)
		c.group.mu.Unlock()
		if leaders != 0 || pending != 0 {
			t.Fatalf("%d slots: %d still taken and %d calls queued after every call ended", slots, leaders, pending)
		}
		if most.Load() > int64(slots) {
			t.Fatalf("%d script calls ran at once with %d slots", most.Load(), slots)
		}
		// The coalescer still works.
		if got, err := c.do(context.Background(), 7); err != nil || got != 7 {
			t.Fatalf("do after the storm = %d, %v", got, err)
		}
	}
}

// A call withdrawn after a leader handed it a slot passes the slot on: to
// the next queued call, or back to the coalescer when none is queued.
func TestWithdrawnCallPassesItsSlotOn(t *testing.T) {
	t.Parallel()
	c := newCoalescer(1, 10, func(int) int { return 1 }, func(_ context.Context, items []int) ([]int, error) { return items, nil })
	call := func(item int) *coalescedCall[int, int] {
		return &coalescedCall[int, int]{item: item, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	}
	b, next := call(1), call(2)
	c.pending = []*coalescedCall[int, int]{b, next}
	c.group.leaders = 1
	c.group.mu.Lock()
	c.group.handOffLocked(c.member) // the leader is done: b is handed its slot
	c.group.mu.Unlock()
	if len(b.lead) != 1 {
		t.Fatalf("the oldest call was not handed the slot")
	}
	if !c.withdraw(b) {
		t.Fatal("a queued call could not be withdrawn")
	}
	if len(next.lead) != 1 || c.group.leaders != 1 {
		t.Fatalf("the withdrawn call's slot did not pass to the next call (leaders %d)", c.group.leaders)
	}
	if !c.withdraw(next) {
		t.Fatal("a queued call could not be withdrawn")
	}
	if c.group.leaders != 0 || len(c.pending) != 0 {
		t.Fatalf("the last withdrawn call kept its slot: leaders %d, %d queued", c.group.leaders, len(c.pending))
	}
}

func TestCoalescerErrorsAndCancellation(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	block := make(chan struct{})
	c := newCoalescer(1, 10, func(int) int { return 1 }, func(_ context.Context, items []int) ([]int, error) {
		if items[0] == 0 {
			<-block
		}
		return nil, boom
	})
	first := make(chan error, 1)
	go func() { _, err := c.do(context.Background(), 0); first <- err }()
	redistest.WaitFor(t, 5*time.Second, "first call running", func() bool {
		c.group.mu.Lock()
		defer c.group.mu.Unlock()
		return c.group.leaders == 1 && len(c.pending) == 0
	})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.do(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("a call cancelled while queued: %v, want context.Canceled", err)
	}
	close(block)
	if err := <-first; !errors.Is(err, boom) {
		t.Fatalf("first call: %v, want the batch's error", err)
	}
}

// TestConcurrentRePushesKeepCountersRight pushes one id from many
// goroutines at once, so that coalesced script calls replace a job created
// earlier in the same call: the counters must still match the one job left.
func TestConcurrentRePushesKeepCountersRight(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		var wg sync.WaitGroup
		for i := 0; i < 60; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				topic := []string{"x", "y", "z"}[i%3]
				delay := time.Duration(i%2) * time.Hour
				if _, err := q.Push(context.Background(), Job{Topic: topic, ID: "same", TTR: time.Minute, Delay: delay}); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		info, err := q.Get(context.Background(), "same")
		if err != nil || info == nil {
			t.Fatalf("get: %v, %v", info, err)
		}
		stats, err := q.Stats(context.Background(), "")
		if err != nil {
			t.Fatal(err)
		}
		want := TopicStats{}
		if info.State == StateDelay {
			want.Delay = 1
		} else {
			want.Ready = 1
		}
		if len(stats) != 1 || stats[info.Topic] != want {
			t.Fatalf("stats %v for one job %s in %s", stats, info.State, info.Topic)
		}
	})
}

// TestOneScriptCallPushingAnIDTwice runs two pushes of one id in a single
// push.lua call, as the coalescer may: the later one wins, with no stale
// index entry delivering the job early or twice.
func TestOneScriptCallPushingAnIDTwice(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		for _, tc := range []struct {
			name          string
			first, second Job
			wantState     string
		}{
			{"ready then delayed", Job{Topic: "a", ID: "x1", TTR: time.Minute}, Job{Topic: "a", ID: "x1", TTR: time.Minute, Delay: time.Hour}, StateDelay},
			{"delayed then ready", Job{Topic: "b", ID: "x2", TTR: time.Minute, Delay: time.Hour}, Job{Topic: "b", ID: "x2", TTR: time.Minute, Body: "2nd"}, StateReady},
			{"ready then ready elsewhere", Job{Topic: "c", ID: "x3", TTR: time.Minute}, Job{Topic: "d", ID: "x3", TTR: time.Minute, Body: "2nd"}, StateReady},
		} {
			p := q.partitionOf(tc.first.ID)
			if _, err := q.execPushes(ctx, p, []pushCall{{jobs: []*Job{&tc.first}}, {jobs: []*Job{&tc.second}}}); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			info, _ := q.Get(ctx, tc.second.ID)
			if info == nil || info.State != tc.wantState || info.Topic != tc.second.Topic {
				t.Fatalf("%s: get = %+v", tc.name, info)
			}
			scanAll(t, q)
			ds, err := q.PopBatch(ctx, []string{"a", "b", "c", "d"}, 10, 0)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantState == StateDelay && len(ds) != 0 {
				t.Fatalf("%s: a job due in an hour was delivered: %+v", tc.name, ds[0])
			}
			if tc.wantState == StateReady && (len(ds) != 1 || ds[0].Body != "2nd" || ds[0].Topic != tc.second.Topic) {
				t.Fatalf("%s: popped %d jobs, want the second version once", tc.name, len(ds))
			}
			stats, _ := q.Stats(ctx, tc.second.Topic)
			total := stats[tc.second.Topic]
			if total.Delay+total.Ready+total.Reserved != 1 {
				t.Fatalf("%s: stats %+v for one job", tc.name, total)
			}
			q.Delete(ctx, tc.second.ID)
		}
	})
}

// Removals that share one script call remove every trace of their jobs,
// whatever their state, and an id given twice is removed once, as if the
// calls ran one after the other.
func TestOneScriptCallRemovingJobsInEveryState(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		// One partition, so that one call can hold every job.
		q := newTestQueue(t, r, func(o *Options) { o.BucketSize = 1 })
		ctx := context.Background()
		mustPush(t, q, Job{Topic: "t", ID: "delayed", TTR: time.Minute, Delay: time.Hour})
		mustPush(t, q, Job{Topic: "t", ID: "reserved", TTR: time.Minute})
		if d := mustPop(t, q, time.Second, "t"); d == nil || d.ID != "reserved" {
			t.Fatalf("pop = %+v", d)
		}
		mustPush(t, q, Job{Topic: "u", ID: "dead", TTR: time.Minute, MaxAttempts: 1})
		if d := mustPop(t, q, time.Second, "u"); d == nil || d.ID != "dead" {
			t.Fatalf("pop = %+v", d)
		}
		if state, _, err := q.Release(ctx, "dead", nil, 0); err != nil || state != StateDead {
			t.Fatalf("release = %s, %v", state, err)
		}
		mustPush(t, q, Job{Topic: "u", ID: "ready", TTR: time.Minute})

		remove := q.execRemovals(q.partitions[0], q.scripts.remove)
		got, err := remove(ctx, [][]any{{"delayed", "ready"}, {"reserved", "dead", "delayed", "unknown"}})
		if err != nil {
			t.Fatal(err)
		}
		want := [][]int64{{1, 1}, {1, 1, 0, 0}}
		for i := range want {
			for j, w := range want[i] {
				if got[i][j].status != w {
					t.Fatalf("statuses %+v, want %v", got, want)
				}
			}
		}
		if stats, err := q.Stats(ctx, ""); err != nil || len(stats) != 0 {
			t.Fatalf("stats after removing every job: %+v, %v", stats, err)
		}
		assertNoTraces(t, r, "delayed", "reserved", "dead", "ready", "unknown", "t,", "u,")
	})
}

// Coalescers sharing a group share its slots: with one slot, a call of one
// partition waits while another partition's script runs, and the freed
// slot goes to the other partition's queued calls before the same
// partition's again.
func TestCoalescersOfAGroupShareItsSlots(t *testing.T) {
	t.Parallel()
	g := newSlotGroup[int, int](1)
	var running, most atomic.Int64
	var mu sync.Mutex
	var order []string
	gates := map[string]chan struct{}{"a": make(chan struct{}), "b": make(chan struct{})}
	exec := func(name string) func(context.Context, []int) ([]int, error) {
		return func(_ context.Context, items []int) ([]int, error) {
			if n := running.Add(1); n > most.Load() {
				most.Store(n)
			}
			defer running.Add(-1)
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			<-gates[name]
			return items, nil
		}
	}
	a := g.coalescer(10, func(int) int { return 1 }, exec("a"))
	b := g.coalescer(10, func(int) int { return 1 }, exec("b"))
	var wg sync.WaitGroup
	call := func(c *coalescer[int, int], v int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, err := c.do(context.Background(), v); err != nil || got != v {
				t.Errorf("do(%d) = %d, %v", v, got, err)
			}
		}()
	}
	queued := func(c *coalescer[int, int], n int) func() bool {
		return func() bool {
			g.mu.Lock()
			defer g.mu.Unlock()
			return len(c.pending) == n
		}
	}
	call(a, 1) // leads, and waits at a's gate
	redistest.WaitFor(t, 5*time.Second, "a's first script call", func() bool { return running.Load() == 1 })
	call(b, 2)
	redistest.WaitFor(t, 5*time.Second, "b's call queued", queued(b, 1))
	call(a, 3)
	redistest.WaitFor(t, 5*time.Second, "a's second call queued", queued(a, 1))
	close(gates["a"])
	redistest.WaitFor(t, 5*time.Second, "b's script call", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == 2
	})
	close(gates["b"])
	wg.Wait()
	if most.Load() != 1 {
		t.Errorf("%d script calls ran at once with one slot in the group", most.Load())
	}
	if got := fmt.Sprint(order); got != "[a b a]" {
		t.Errorf("script calls ran in the order %s, want [a b a]: the slot goes to the other partition first", got)
	}
}
