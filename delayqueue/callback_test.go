package delayqueue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

func TestCallbackJobsGoToDispatchersOnly(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		cb := &Callback{URL: "https://merchant.example/notify", TimeoutSeconds: 5}
		if _, err := q.Push(ctx, Job{Topic: "pay", ID: "cb1", Body: "paid", Callback: cb, Retry: []int{0}}); err != nil {
			t.Fatal(err)
		}
		if d := mustPop(t, q, 0, "pay"); d != nil {
			t.Fatalf("a callback job was handed to pop: %+v", d)
		}
		got, err := q.ClaimCallbacks(ctx, 10)
		if err != nil || len(got) != 1 || got[0].ID != "cb1" || got[0].Attempts != 1 || got[0].Body != "paid" || got[0].Callback.URL != cb.URL {
			t.Fatalf("claim callbacks = %+v, %v", got, err)
		}
		info, _ := q.Get(ctx, "cb1")
		if info.State != StateReserved || info.LeaseUntil.Sub(time.Now()) < 10*time.Second {
			t.Fatalf("lease should be the timeout plus a margin: %+v", info)
		}
		if again, _ := q.ClaimCallbacks(ctx, 10); len(again) != 0 {
			t.Fatalf("claimed twice: %+v", again)
		}
		first := got[0]
		state, err := q.CallbackFailed(ctx, first, 503, "503 Service Unavailable", "busy")
		if err != nil || state != StateReady {
			t.Fatalf("first failure: %s, %v", state, err)
		}
		got, _ = q.ClaimCallbacks(ctx, 10)
		if len(got) != 1 || got[0].Attempts != 2 || got[0].CreatedMS != first.CreatedMS {
			t.Fatalf("second claim = %+v", got)
		}
		if _, err := q.CallbackFailed(ctx, first, 500, "", ""); !errors.Is(err, ErrStaleDelivery) {
			t.Fatalf("stale failure report: %v", err)
		}
		state, err = q.CallbackFailed(ctx, got[0], 0, "connection refused", "")
		if err != nil || state != StateDead {
			t.Fatalf("last failure: %s, %v", state, err)
		}
		info, _ = q.Get(ctx, "cb1")
		if info.DeadReason != ReasonCallbackFailed || info.LastError != "connection refused" || info.Callback == nil {
			t.Fatalf("dead letter = %+v", info)
		}
	})
}

func TestCallbackDefaultBackoff(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		if _, err := q.Push(ctx, Job{Topic: "pay", ID: "cb2", Callback: &Callback{URL: "http://example.com/"}}); err != nil {
			t.Fatal(err)
		}
		info, _ := q.Get(ctx, "cb2")
		if len(info.Retry) != len(DefaultCallbackRetry) {
			t.Fatalf("retry = %v, want the default backoff", info.Retry)
		}
		got, _ := q.ClaimCallbacks(ctx, 1)
		if len(got) != 1 {
			t.Fatal("not claimed")
		}
		if state, err := q.CallbackFailed(ctx, got[0], 500, "", ""); err != nil || state != StateDelay {
			t.Fatalf("after a failure: %s, %v (want a delay, not an immediate retry)", state, err)
		}
	})
}

func TestCallbackValidation(t *testing.T) {
	t.Parallel()
	for _, cb := range []Callback{
		{URL: "ftp://x/"}, {URL: "/relative"}, {URL: "http://"}, {URL: "http://u:p@x/"},
		{URL: "http://x/", Method: "GET"},
		{URL: "http://x/", Headers: map[string]string{"X-DelayQueue-Id": "1"}},
		{URL: "http://x/", Headers: map[string]string{"host": "y"}},
		{URL: "http://x/", Headers: map[string]string{"A": "b\r\nc: d"}},
		{URL: "http://x/", TimeoutSeconds: 301},
	} {
		if err := cb.Validate(); !errors.Is(err, ErrInvalidJob) {
			t.Errorf("%+v: %v, want ErrInvalidJob", cb, err)
		}
	}
	if err := (&Callback{URL: "https://x.example/a?b=c", Method: "PUT", Headers: map[string]string{"Authorization": "t"}, TimeoutSeconds: 300}).Validate(); err != nil {
		t.Errorf("valid callback refused: %v", err)
	}
}

// A waiting webhook dispatcher is woken when a callback job becomes ready
// on a partition (here a delayed one, moved by the scanner: on the
// cluster, the partition's loop 0 waits on its own primary); one claim
// takes the ready callback jobs of every partition; a job given back
// (UnclaimCallback) is ready again with its attempt not counted; a
// success finishes the job.
func TestCallbackDispatcherWakesAndClaimsAcrossPartitions(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		cb := &Callback{URL: "https://merchant.example/notify"}
		ids := idsPerPartition(t, q, "hook-", 1)

		woken := make(chan struct{})
		go func() {
			q.WaitCallbacks(ctx, 20*time.Second)
			close(woken)
		}()
		redistest.WaitFor(t, 5*time.Second, "the dispatcher waiting", q.WaitingForCallbacks)
		if _, err := q.Push(ctx, Job{Topic: "pay", ID: ids[0], TTR: time.Minute, Delay: 200 * time.Millisecond, Callback: cb}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-woken:
		case <-time.After(10 * time.Second):
			t.Fatal("the waiting dispatcher was not woken by a callback job made ready")
		}
		var first []CallbackDelivery
		redistest.WaitFor(t, 5*time.Second, "the delayed callback job claimed", func() bool {
			var err error
			first, err = q.ClaimCallbacks(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			return len(first) > 0
		})
		if len(first) != 1 || first[0].ID != ids[0] || first[0].Attempts != 1 {
			t.Fatalf("first claim = %+v", first)
		}

		for _, id := range ids[1:] {
			if _, err := q.Push(ctx, Job{Topic: "pay", ID: id, TTR: time.Minute, Callback: cb, Body: "body of " + id}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := q.ClaimCallbacks(ctx, 10)
		if err != nil || len(got) != len(ids)-1 {
			t.Fatalf("one claim of the jobs of %d partitions = %+v, %v", len(ids)-1, got, err)
		}
		back := got[0]
		if ok, err := q.UnclaimCallback(ctx, back); err != nil || !ok {
			t.Fatalf("unclaim %s = %v, %v", back.ID, ok, err)
		}
		if info, _ := q.Get(ctx, back.ID); info == nil || info.State != StateReady || info.Attempts != 0 {
			t.Fatalf("after unclaim: %+v, want ready with no attempt counted", info)
		}
		again, err := q.ClaimCallbacks(ctx, 10)
		if err != nil || len(again) != 1 || again[0].ID != back.ID || again[0].Attempts != 1 || again[0].Body != back.Body {
			t.Fatalf("claim after unclaim = %+v, %v", again, err)
		}
		for _, id := range ids {
			if err := q.CallbackSucceeded(ctx, CallbackDelivery{ID: id, Attempts: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if topics, err := q.Topics(ctx); err != nil || len(topics) != 0 {
			t.Fatalf("topics after every call succeeded: %v, %v", topics, err)
		}
		assertNoTraces(t, r, ids...)
	})
}

// A webhook job pushed again under its id while a call of it runs, and
// called again at once, counts its attempts from 1 again: the old call's
// report (attempt 1 too) must not end the new delivery. The job's creation
// time completes the receipt.
func TestACallOfAJobPushedAgainCannotEndTheNewDelivery(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		cb := &Callback{URL: "https://merchant.example/notify", TimeoutSeconds: 5}
		claimOne := func() CallbackDelivery {
			t.Helper()
			var got []CallbackDelivery
			redistest.WaitFor(t, 5*time.Second, "the callback job claimed", func() bool {
				var err error
				got, err = q.ClaimCallbacks(ctx, 10)
				return err == nil && len(got) == 1
			})
			return got[0]
		}
		mustPush(t, q, Job{Topic: "again", ID: "again-1", Body: "first", Callback: cb})
		old := claimOne()
		time.Sleep(2 * time.Millisecond) // a creation time of its own, in ms
		mustPush(t, q, Job{Topic: "again", ID: "again-1", Body: "second", Callback: cb})
		current := claimOne()
		if current.Attempts != old.Attempts || current.CreatedMS == old.CreatedMS {
			t.Fatalf("deliveries %+v and %+v: want the same attempt, other creation times", old, current)
		}
		if err := q.CallbackSucceeded(ctx, old); !errors.Is(err, ErrStaleDelivery) {
			t.Errorf("the old call's success: %v, want ErrStaleDelivery", err)
		}
		if _, err := q.CallbackFailed(ctx, old, 500, "500", ""); !errors.Is(err, ErrStaleDelivery) {
			t.Errorf("the old call's failure: %v, want ErrStaleDelivery", err)
		}
		if ok, err := q.UnclaimCallback(ctx, old); err != nil || ok {
			t.Errorf("the old call given back: %v, %v; want nothing done", ok, err)
		}
		if info, err := q.Get(ctx, "again-1"); err != nil || info == nil || info.Body != "second" || info.State != StateReserved {
			t.Fatalf("after the old call's reports: %+v, %v; want the second job, still called", info, err)
		}
		if err := q.CallbackSucceeded(ctx, current); err != nil {
			t.Fatalf("the new call's success: %v", err)
		}
		if info, _ := q.Get(ctx, "again-1"); info != nil {
			t.Fatalf("after the new call's success: %+v, want it finished", info)
		}
	})
}
