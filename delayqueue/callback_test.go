package delayqueue

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCallbackJobsGoToDispatchersOnly(t *testing.T) {
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
		state, err := q.CallbackFailed(ctx, "cb1", 1, 503, "503 Service Unavailable", "busy")
		if err != nil || state != StateReady {
			t.Fatalf("first failure: %s, %v", state, err)
		}
		got, _ = q.ClaimCallbacks(ctx, 10)
		if len(got) != 1 || got[0].Attempts != 2 {
			t.Fatalf("second claim = %+v", got)
		}
		if _, err := q.CallbackFailed(ctx, "cb1", 1, 500, "", ""); !errors.Is(err, ErrStaleDelivery) {
			t.Fatalf("stale failure report: %v", err)
		}
		state, err = q.CallbackFailed(ctx, "cb1", 2, 0, "connection refused", "")
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
		if state, err := q.CallbackFailed(ctx, "cb2", 1, 500, "", ""); err != nil || state != StateDelay {
			t.Fatalf("after a failure: %s, %v (want a delay, not an immediate retry)", state, err)
		}
	})
}

func TestCallbackValidation(t *testing.T) {
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
