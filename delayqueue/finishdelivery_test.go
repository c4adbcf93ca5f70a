package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// FinishDelivery finishes a job only for the delivery that holds it; every
// refusal leaves the job as it was, counters included.
func TestFinishDeliveryChecksTheReceipt(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		zero := time.Duration(0)

		// held: reserved by delivery 1. again: released once, reserved by
		// delivery 2. waiting: delivery 1 released, delayed by its
		// schedule. later: never delivered. dead: dead-lettered.
		mustPush(t, q, Job{Topic: "fd-held", ID: "held"})
		mustPush(t, q, Job{Topic: "fd-again", ID: "again"})
		mustPush(t, q, Job{Topic: "fd-waiting", ID: "waiting", Retry: []int{3600}})
		mustPush(t, q, Job{Topic: "fd-later", ID: "later", Delay: time.Hour})
		mustPush(t, q, Job{Topic: "fd-dead", ID: "dead", MaxAttempts: 1})
		pop := func(topic, id string, attempt int) {
			t.Helper()
			if d := mustPop(t, q, time.Second, topic); d == nil || d.ID != id || d.Attempts != attempt {
				t.Fatalf("pop %s = %+v, want %s attempt %d", topic, d, id, attempt)
			}
		}
		release := func(id string, attempt int, want string) {
			t.Helper()
			var delay *time.Duration
			if want == StateReady {
				delay = &zero
			}
			if state, _, err := q.Release(ctx, id, delay, attempt); err != nil || state != want {
				t.Fatalf("release %s = %s, %v; want %s", id, state, err, want)
			}
		}
		pop("fd-held", "held", 1)
		pop("fd-again", "again", 1)
		release("again", 1, StateReady)
		pop("fd-again", "again", 2)
		pop("fd-waiting", "waiting", 1)
		release("waiting", 1, StateDelay)
		pop("fd-dead", "dead", 1)
		release("dead", 1, StateDead)

		before := jobStates(t, q, "held", "again", "waiting", "later", "dead")
		stats, err := q.Stats(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name      string
			id        string
			attempt   int
			want      error
			wantState string
		}{
			{"a later delivery's attempt", "held", 2, ErrStaleDelivery, StateReserved},
			{"an earlier delivery's attempt", "again", 1, ErrStaleDelivery, StateReserved},
			{"a delivery released since", "waiting", 1, ErrNotReserved, StateDelay},
			{"a job never delivered", "later", 1, ErrNotReserved, StateDelay},
			{"a dead letter", "dead", 1, ErrDead, StateDead},
			{"a negative attempt", "held", -1, ErrInvalidJob, ""},
		} {
			state, err := q.FinishDelivery(ctx, tc.id, tc.attempt)
			if !errors.Is(err, tc.want) || state != tc.wantState {
				t.Errorf("%s: FinishDelivery(%s, %d) = %q, %v; want %q, %v", tc.name, tc.id, tc.attempt, state, err, tc.wantState, tc.want)
			}
		}
		if after := jobStates(t, q, "held", "again", "waiting", "later", "dead"); after != before {
			t.Fatalf("refusals changed jobs: %s, were %s", after, before)
		}
		if got, _ := q.Stats(ctx, ""); !equalStats(got, stats) {
			t.Fatalf("refusals changed the counts: %+v, were %+v", got, stats)
		}

		if _, err := q.FinishDelivery(ctx, "unknown", 1); err != nil {
			t.Errorf("FinishDelivery of an unknown id = %v, want nil", err)
		}
		for _, d := range []struct {
			id      string
			attempt int
		}{{"held", 1}, {"again", 2}} {
			if _, err := q.FinishDelivery(ctx, d.id, d.attempt); err != nil {
				t.Fatalf("FinishDelivery(%s, %d) = %v", d.id, d.attempt, err)
			}
			if info, err := q.Get(ctx, d.id); err != nil || info != nil {
				t.Fatalf("after its finish %s = %+v, %v; want gone", d.id, info, err)
			}
		}
		// Attempt 0 is a plain finish, which takes any state but dead.
		if _, err := q.FinishDelivery(ctx, "later", 0); err != nil {
			t.Fatalf("FinishDelivery(later, 0) = %v", err)
		}
		assertNoTraces(t, r, "held", "again", "later", "fd-held", "fd-again", "fd-later")
		got, err := q.Stats(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]TopicStats{"fd-waiting": {Delay: 1}, "fd-dead": {Dead: 1}}
		if !equalStats(got, want) {
			t.Fatalf("stats after the finishes = %+v, want %+v", got, want)
		}
	})
}

// jobStates describes the jobs ids as Get sees them, for comparing.
func jobStates(t *testing.T, q *Queue, ids ...string) string {
	t.Helper()
	var out string
	for _, id := range ids {
		info, err := q.Get(context.Background(), id)
		if err != nil || info == nil {
			t.Fatalf("get %s = %+v, %v", id, info, err)
		}
		out += fmt.Sprintf("%s:%s/%d/%d ", id, info.State, info.Attempts, info.LeaseUntil.UnixMilli())
	}
	return out
}

func equalStats(a, b map[string]TopicStats) bool {
	if len(a) != len(b) {
		return false
	}
	for topic, s := range a {
		if b[topic] != s {
			return false
		}
	}
	return true
}
