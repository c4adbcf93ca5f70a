package delayqueue

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// JobInfo.AttemptsLimit, which /get reports, is the number of deliveries
// the scripts make before the dead letters: each job here is delivered and
// released at once until it dies, and the deliveries are counted. An
// unlimited job (limit 0) outlives more deliveries than any limited one.
func TestAttemptsLimitIsWhatTheScriptsEnforce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		hook := &Callback{URL: "https://merchant.example/notify"}
		tests := []struct {
			name string
			job  Job
			want int
		}{
			{"no schedule, no max_attempts: unlimited", Job{}, 0},
			{"max_attempts alone", Job{MaxAttempts: 2}, 2},
			{"a schedule alone: one more than its retries", Job{Retry: []int{1, 2}}, 3},
			{"max_attempts beyond the schedule", Job{Retry: []int{1}, MaxAttempts: 4}, 4},
			{"max_attempts within the schedule", Job{Retry: []int{1, 1, 1}, MaxAttempts: 2}, 2},
			{"a callback job with neither: the default backoff", Job{Callback: hook}, len(DefaultCallbackRetry) + 1},
			{"a callback job with max_attempts", Job{Callback: hook, MaxAttempts: 2}, 2},
			{"a callback job with a schedule", Job{Callback: hook, Retry: []int{1}}, 2},
		}
		// Deliveries made to a job that should not die: more than any
		// limit above.
		const unlimitedRounds = 8
		for i, tc := range tests {
			job := tc.job
			job.Topic, job.ID, job.TTR = fmt.Sprintf("limit%d", i), fmt.Sprintf("limit-%d", i), time.Minute
			mustPush(t, q, job)
			info, err := q.Get(ctx, job.ID)
			if err != nil || info == nil {
				t.Fatalf("%s: get = %+v, %v", tc.name, info, err)
			}
			if got := info.AttemptsLimit(); got != tc.want {
				t.Errorf("%s: AttemptsLimit() = %d, want %d (max_attempts %d, retry %v)", tc.name, got, tc.want, info.MaxAttempts, info.Retry)
			}
			rounds := tc.want
			if rounds == 0 {
				rounds = unlimitedRounds
			}
			zero := time.Duration(0)
			for n := 1; n <= rounds; n++ {
				attempt := deliverOnce(t, q, job)
				if attempt != n {
					t.Fatalf("%s: delivery %d came as attempt %d", tc.name, n, attempt)
				}
				var state string
				var err error
				if job.Callback == nil {
					state, _, err = q.Release(ctx, job.ID, &zero, attempt)
				} else {
					// As CallbackFailed, but due again at once: a consumer
					// may not release a webhook job.
					state, _, err = q.leaseChange(ctx, "callback failed", q.scripts.release, job.ID, int64(0), attempt,
						ReasonCallbackFailed, 500, "500 Internal Server Error", "")
				}
				if err != nil {
					t.Fatalf("%s: release of delivery %d: %v", tc.name, n, err)
				}
				if dies := n == tc.want; (state == StateDead) != dies {
					t.Fatalf("%s: after delivery %d the job is %s (limit %d)", tc.name, n, state, tc.want)
				}
			}
		}
	})
}

// deliverOnce takes job's next delivery, as a consumer or as the webhook
// dispatcher, and returns its attempt number.
func deliverOnce(t *testing.T, q *Queue, job Job) int {
	t.Helper()
	if job.Callback == nil {
		d := mustPop(t, q, time.Second, job.Topic)
		if d == nil || d.ID != job.ID {
			t.Fatalf("pop %s = %+v, want %s", job.Topic, d, job.ID)
		}
		return d.Attempts
	}
	got, err := q.ClaimCallbacks(context.Background(), 10)
	if err != nil || len(got) != 1 || got[0].ID != job.ID {
		t.Fatalf("claim callbacks = %+v, %v, want %s alone", got, err, job.ID)
	}
	return got[0].Attempts
}
