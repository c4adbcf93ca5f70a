package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// TestNotificationSchedule runs the seed's Alipay-style schedule on a fake
// clock: deliveries at 0, 2m, 10m, 10m, 1h, 2h, 6h and 15h after each failed
// delivery ends, then the dead letters. On miniredis only: the test moves
// its clock.
func TestNotificationSchedule(t *testing.T) {
	t.Parallel()
	m := redistest.Mini(t)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(clock)
	q := newTestQueue(t, onServer(m.Addr()), func(o *Options) { o.ScanInterval = 5 * time.Millisecond })
	ctx := context.Background()
	retry := []int{120, 600, 600, 3600, 7200, 21600, 54000}
	const ttr = 30 * time.Second
	if _, err := q.Push(ctx, Job{Topic: "notify", ID: "pay-1", TTR: ttr, Retry: retry, Body: "paid"}); err != nil {
		t.Fatal(err)
	}
	// Delivery n starts when the previous lease ended plus retry[n-2].
	want := []time.Time{clock}
	for _, r := range retry {
		want = append(want, want[len(want)-1].Add(ttr).Add(time.Duration(r)*time.Second))
	}
	for n, at := range want {
		if n > 0 {
			m.SetTime(at.Add(-time.Millisecond))
			scanAll(t, q)
			if d, _ := q.Pop(ctx, []string{"notify"}, 0); d != nil {
				t.Fatalf("delivery %d came before %v", n+1, at)
			}
		}
		m.SetTime(at)
		var d *Delivery
		redistest.WaitFor(t, 5*time.Second, fmt.Sprintf("delivery %d at %v", n+1, at), func() bool {
			d, _ = q.Pop(ctx, []string{"notify"}, 0)
			return d != nil
		})
		if d.Attempts != n+1 || d.Body != "paid" {
			t.Fatalf("delivery %d = %+v", n+1, d)
		}
		// Never finished: the lease runs out.
		m.SetTime(at.Add(ttr))
	}
	var info *JobInfo
	redistest.WaitFor(t, 5*time.Second, "dead-lettered after the 8th delivery", func() bool {
		info, _ = q.Get(ctx, "pay-1")
		return info != nil && info.State == StateDead
	})
	if info.Attempts != 8 || info.DeadReason != ReasonTTRExpired || !info.DeadAt.Equal(want[7].Add(ttr)) {
		t.Fatalf("dead letter = %+v", info)
	}
	if err := q.Finish(ctx, "pay-1"); !errors.Is(err, ErrDead) {
		t.Fatalf("finish of a dead job: %v, want ErrDead", err)
	}
	jobs, total, err := q.DeadList(ctx, "notify", 0, 10)
	if err != nil || total != 1 || len(jobs) != 1 || jobs[0].ID != "pay-1" {
		t.Fatalf("dead list = %+v %d %v", jobs, total, err)
	}
	stats, _ := q.Stats(ctx, "notify")
	if stats["notify"] != (TopicStats{Dead: 1}) {
		t.Fatalf("stats = %+v", stats)
	}
	kicked, err := q.DeadKick(ctx, "notify", "pay-1", 0)
	if err != nil || len(kicked) != 1 {
		t.Fatalf("kick = %v, %v", kicked, err)
	}
	d, _ := q.Pop(ctx, []string{"notify"}, time.Second)
	if d == nil || d.Attempts != 1 {
		t.Fatalf("pop after kick = %+v", d)
	}
	if err := q.Finish(ctx, "pay-1"); err != nil {
		t.Fatal(err)
	}
	if topics, _ := q.Topics(ctx); len(topics) != 0 {
		t.Fatalf("topics after finishing everything = %v", topics)
	}
}

// TestMaxAttemptsLongerThanSchedule runs on miniredis only: it moves the
// clock.
func TestMaxAttemptsLongerThanSchedule(t *testing.T) {
	t.Parallel()
	m := redistest.Mini(t)
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	m.SetTime(clock)
	q := newTestQueue(t, onServer(m.Addr()), func(o *Options) { o.ScanInterval = 5 * time.Millisecond })
	ctx := context.Background()
	if _, err := q.Push(ctx, Job{Topic: "t", ID: "j", TTR: time.Second, Retry: []int{10, 20}, MaxAttempts: 4}); err != nil {
		t.Fatal(err)
	}
	at := clock
	for n, wait := range []int{0, 10, 20, 20} { // the last interval repeats
		at = at.Add(time.Duration(wait) * time.Second)
		m.SetTime(at)
		var d *Delivery
		redistest.WaitFor(t, 5*time.Second, fmt.Sprintf("delivery %d", n+1), func() bool {
			d, _ = q.Pop(ctx, []string{"t"}, 0)
			return d != nil
		})
		// Released at once: the delivery ends now.
		state, _, err := q.Release(ctx, "j", nil, d.Attempts)
		if err != nil {
			t.Fatal(err)
		}
		if n < 3 && state != StateDelay || n == 3 && state != StateDead {
			t.Fatalf("after release %d: state %s", n+1, state)
		}
	}
	info, _ := q.Get(ctx, "j")
	if info.State != StateDead || info.DeadReason != ReasonReleased || info.Attempts != 4 {
		t.Fatalf("get = %+v", info)
	}
}

func TestReleaseTouchTransitions(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		mustPush(t, q, Job{Topic: "rt", ID: "delayed", Delay: time.Hour})
		mustPush(t, q, Job{Topic: "rt", ID: "held", TTR: 2 * time.Second})
		d := mustPop(t, q, time.Second, "rt")
		if d == nil || d.ID != "held" {
			t.Fatalf("pop = %+v", d)
		}
		mustPush(t, q, Job{Topic: "rt", ID: "hook", Callback: &Callback{URL: "http://127.0.0.1:9/hook", TimeoutSeconds: 5}})
		var hooks []CallbackDelivery
		redistest.WaitFor(t, 5*time.Second, "the webhook job claimed", func() bool {
			var err error
			hooks, err = q.ClaimCallbacks(ctx, 1)
			return err == nil && len(hooks) == 1
		})
		zero := time.Duration(0)
		for _, tc := range []struct {
			name string
			op   func() error
			want error
		}{
			{"release unknown", func() error { _, _, err := q.Release(ctx, "nope", nil, 0); return err }, ErrNotFound},
			{"touch unknown", func() error { _, _, err := q.Touch(ctx, "nope", 0); return err }, ErrNotFound},
			{"release delayed", func() error { _, _, err := q.Release(ctx, "delayed", nil, 0); return err }, ErrNotReserved},
			{"touch delayed", func() error { _, _, err := q.Touch(ctx, "delayed", 0); return err }, ErrNotReserved},
			{"touch stale attempt", func() error { _, _, err := q.Touch(ctx, "held", 2); return err }, ErrStaleDelivery},
			{"release stale attempt", func() error { _, _, err := q.Release(ctx, "held", nil, 7); return err }, ErrStaleDelivery},
			{"touch current attempt", func() error { _, _, err := q.Touch(ctx, "held", 1); return err }, nil},
			{"release with delay 0", func() error { _, _, err := q.Release(ctx, "held", &zero, 1); return err }, nil},
			{"release again", func() error { _, _, err := q.Release(ctx, "held", nil, 0); return err }, ErrNotReserved},
			// Only the dispatcher calling it ends a webhook job's delivery.
			{"release a webhook job", func() error { _, _, err := q.Release(ctx, "hook", &zero, 0); return err }, ErrWebhookJob},
			{"touch a webhook job", func() error { _, _, err := q.Touch(ctx, "hook", 1); return err }, nil},
			{"its call fails", func() error {
				_, err := q.CallbackFailed(ctx, hooks[0], 500, "500 Internal Server Error", "")
				return err
			}, nil},
		} {
			if err := tc.op(); !errors.Is(err, tc.want) {
				t.Fatalf("%s: err %v, want %v", tc.name, err, tc.want)
			}
		}
		d = mustPop(t, q, time.Second, "rt")
		if d == nil || d.ID != "held" || d.Attempts != 2 {
			t.Fatalf("pop after release = %+v", d)
		}
		// Touch keeps a job past its ttr.
		_, until, err := q.Touch(ctx, "held", 2)
		if err != nil || time.Until(until) < time.Second {
			t.Fatalf("touch = %v, %v", until, err)
		}
	})
}

func TestPushIfAbsentAndBatches(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		res, err := q.PushBatch(ctx, []Job{
			{Topic: "b", ID: "1", TTR: time.Minute, Body: "one"},
			{Topic: "b", ID: "2", TTR: time.Minute, Body: "two"},
			{Topic: "b", ID: "3", TTR: time.Minute, Delay: time.Hour},
		})
		if err != nil || len(res) != 3 || res[0].Status != PushCreated {
			t.Fatalf("batch = %+v, %v", res, err)
		}
		pushed, err := q.Push(ctx, Job{Topic: "b", ID: "1", TTR: time.Minute, Body: "changed", IfAbsent: true})
		if err != nil || pushed.Status != PushExists {
			t.Fatalf("if_absent push = %+v, %v", pushed, err)
		}
		if _, err := q.PushBatch(ctx, []Job{{Topic: "b", ID: "4", TTR: time.Minute}, {Topic: "b", ID: "4", TTR: time.Minute}}); !errors.Is(err, ErrInvalidJob) {
			t.Fatalf("batch with a repeated id: %v", err)
		}
		if _, err := q.PushBatch(ctx, []Job{{Topic: "b", ID: "5", TTR: time.Minute}, {Topic: "b", ID: "6"}}); !errors.Is(err, ErrInvalidJob) {
			t.Fatalf("batch with an invalid job: %v", err)
		}
		if info, _ := q.Get(ctx, "5"); info != nil {
			t.Fatal("an invalid batch stored a job")
		}
		// The two jobs may sit in different partitions, which keep no order
		// between them.
		ds, err := q.PopBatch(ctx, []string{"b"}, 10, time.Second)
		if err != nil || len(ds) != 2 || ds[0].Body+ds[1].Body != "onetwo" && ds[0].Body+ds[1].Body != "twoone" {
			t.Fatalf("pop batch = %+v, %v", ds, err)
		}
		statuses, err := q.FinishBatch(ctx, []string{"1", "2", "unknown"})
		if err != nil || fmt.Sprint(statuses) != fmt.Sprint([]RemoveStatus{Removed, Removed, RemoveUnknown}) {
			t.Fatalf("finish batch = %v, %v", statuses, err)
		}
		statuses, err = q.DeleteBatch(ctx, []string{"3", "unknown"})
		if err != nil || fmt.Sprint(statuses) != fmt.Sprint([]RemoveStatus{Removed, RemoveUnknown}) {
			t.Fatalf("delete batch = %v, %v", statuses, err)
		}
		if topics, _ := q.Topics(ctx); len(topics) != 0 {
			t.Fatalf("topics left: %v", topics)
		}
	})
}

func TestDeadLetterCapAndDelete(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		// The cap is shared out over the partitions: with one, it is exact.
		q := newTestQueue(t, r, func(o *Options) { o.DeadMaxPerTopic = 3; o.BucketSize = 1 })
		ctx := context.Background()
		for i := 0; i < 5; i++ {
			id := fmt.Sprintf("d%d", i)
			mustPush(t, q, Job{Topic: "dl", ID: id, MaxAttempts: 1})
			d := mustPop(t, q, time.Second, "dl")
			if d == nil || d.ID != id {
				t.Fatalf("pop = %+v", d)
			}
			if state, _, err := q.Release(ctx, id, nil, 1); err != nil || state != StateDead {
				t.Fatalf("release = %s, %v", state, err)
			}
		}
		jobs, total, err := q.DeadList(ctx, "dl", 0, 10)
		if err != nil || total != 3 || len(jobs) != 3 || jobs[0].ID != "d4" || jobs[2].ID != "d2" {
			t.Fatalf("dead list = %+v, %d, %v", jobs, total, err)
		}
		if info, _ := q.Get(ctx, "d0"); info != nil {
			t.Fatalf("dropped dead letter still stored: %+v", info)
		}
		if dropped, total, err := q.DeadDropped(ctx); err != nil || total != 2 || fmt.Sprint(dropped) != "map[dl:2]" {
			t.Fatalf("dead dropped = %v, %d, %v; want dl:2, 2 in all", dropped, total, err)
		}
		kicked, err := q.DeadKick(ctx, "dl", "", 1)
		if err != nil || len(kicked) != 1 || kicked[0] != "d2" {
			t.Fatalf("kick oldest = %v, %v", kicked, err)
		}
		if n, err := q.DeadDelete(ctx, "dl", ""); err != nil || n != 2 {
			t.Fatalf("delete all = %d, %v", n, err)
		}
		stats, _ := q.Stats(ctx, "dl")
		if stats["dl"] != (TopicStats{Ready: 1}) {
			t.Fatalf("stats = %+v", stats["dl"])
		}
	})
}

// Concurrent kicks of the oldest dead letters each kick as many as they
// ask for while enough are left, though they read the same oldest ones.
func TestConcurrentKicksOfTheOldestEachKickTheirCount(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		const dead, kickers, rounds, each = 1000, 10, 3, 20
		var jobs []Job
		for i := range dead {
			jobs = append(jobs, Job{Topic: "kicks", ID: fmt.Sprintf("k%d", i), MaxAttempts: 1, TTR: time.Minute})
		}
		if _, err := q.PushBatch(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		for popped := 0; popped < dead; {
			ds, err := q.PopBatch(ctx, []string{"kicks"}, 100, time.Second)
			if err != nil || len(ds) == 0 {
				t.Fatalf("pop = %d jobs, %v", len(ds), err)
			}
			for _, d := range ds {
				if state, _, err := q.Release(ctx, d.ID, nil, d.Attempts); err != nil || state != StateDead {
					t.Fatalf("release %s = %s, %v", d.ID, state, err)
				}
			}
			popped += len(ds)
		}
		results := make([][][]string, kickers)
		errs := make([][]error, kickers)
		var wg sync.WaitGroup
		for i := range kickers {
			results[i], errs[i] = make([][]string, rounds), make([]error, rounds)
			wg.Go(func() {
				for r := range rounds {
					results[i][r], errs[i][r] = q.DeadKick(ctx, "kicks", "", each)
				}
			})
		}
		wg.Wait()
		seen := map[string]bool{}
		for i := range kickers {
			for r := range rounds {
				if errs[i][r] != nil || len(results[i][r]) != each {
					t.Errorf("kicker %d, round %d kicked %d, %v; want %d", i, r, len(results[i][r]), errs[i][r], each)
				}
				for _, id := range results[i][r] {
					if seen[id] {
						t.Errorf("%s kicked twice", id)
					}
					seen[id] = true
				}
			}
		}
		if _, total, err := q.DeadList(ctx, "kicks", 0, 1); err != nil || total != dead-kickers*rounds*each {
			t.Errorf("dead letters left: %d, %v; want %d", total, err, dead-kickers*rounds*each)
		}
	})
}

// scanAll runs one move-due pass over every partition, so a check that
// nothing is due yet does not depend on the scanners' timing.
func scanAll(t *testing.T, q *Queue) {
	t.Helper()
	for _, p := range q.partitions {
		if _, err := p.scanner.moveDue(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestUpcomingCountsDueJobsPerSlot(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		for i, delay := range []time.Duration{90 * time.Second, 100 * time.Second, 270 * time.Second, 2 * time.Hour} {
			mustPush(t, q, Job{Topic: "u", ID: fmt.Sprint(i), Delay: delay})
		}
		_, counts, err := q.Upcoming(context.Background(), time.Minute, 60)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]int64, 60)
		want[1], want[4] = 2, 1
		if fmt.Sprint(counts) != fmt.Sprint(want) {
			t.Fatalf("counts = %v, want %v", counts, want)
		}

		// Topics dense and sparse, over a day of minutes: the counts are
		// taken by halving, and add up to every job's slot. Each job is due
		// half-way through its slot, so the call's start a few seconds
		// after the pushes does not move it.
		want = make([]int64, 1440)
		var jobs []Job
		add := func(topic string, slot int) {
			jobs = append(jobs, Job{Topic: topic, ID: fmt.Sprintf("%s-%d", topic, len(jobs)), TTR: time.Minute,
				Delay: time.Duration(slot)*time.Minute + 30*time.Second})
			want[slot]++
		}
		for slot := range 200 {
			add("dense", slot)
		}
		for range 3 {
			add("dense", 10)
		}
		for _, slot := range []int{7, 33, 34, 700, 1439} {
			add("sparse", slot)
		}
		for i := range 50 {
			add(fmt.Sprintf("one-%d", i), (i*97)%1440)
		}
		if _, err := q.PushBatch(context.Background(), jobs); err != nil {
			t.Fatal(err)
		}
		want[1], want[4] = want[1]+2, want[4]+1
		want[119] += 1 // u's job due in 2 h
		_, counts, err = q.Upcoming(context.Background(), time.Minute, 1440)
		if err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if counts[i] != want[i] {
				t.Errorf("slot %d: %d jobs, want %d", i, counts[i], want[i])
			}
		}
	})
}

// push.lua reuses one argument table for every job of a batch, and claim
// reads bodies of up to two chunks with the job's fields: a job must keep
// only its own optional fields, and bodies of every size must come back
// byte for byte.
func TestBatchJobsKeepTheirOwnFields(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		bodies := []string{"", "x", strings.Repeat("a", 64), strings.Repeat("b", 65), strings.Repeat("c", 128),
			strings.Repeat("d", 129), strings.Repeat("é", 200), strings.Repeat("f", 64*100+1)}
		var jobs []Job
		for i, body := range bodies {
			job := Job{Topic: "own", ID: fmt.Sprint("plain", i), TTR: time.Minute, Body: body}
			if i%2 == 0 {
				job.ID = fmt.Sprint("retry", i)
				job.Retry = []int{1, 2}
				job.MaxAttempts = 5
			}
			jobs = append(jobs, job)
		}
		if _, err := q.PushBatch(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		for _, job := range jobs {
			info, err := q.Get(ctx, job.ID)
			if err != nil || info == nil {
				t.Fatalf("get %s: %+v, %v", job.ID, info, err)
			}
			if info.Body != job.Body || len(info.Retry) != len(job.Retry) || info.MaxAttempts != job.MaxAttempts {
				t.Errorf("%s: body of %d bytes (want %d), retry %v (want %v), max_attempts %d (want %d)",
					job.ID, len(info.Body), len(job.Body), info.Retry, job.Retry, info.MaxAttempts, job.MaxAttempts)
			}
		}
		got := map[string]string{}
		for len(got) < len(jobs) {
			ds, err := q.PopBatch(ctx, []string{"own"}, 3, time.Second)
			if err != nil || len(ds) == 0 {
				t.Fatalf("pop after %d of %d jobs: %v, %v", len(got), len(jobs), ds, err)
			}
			for _, d := range ds {
				got[d.ID] = d.Body
			}
		}
		for _, job := range jobs {
			if got[job.ID] != job.Body {
				t.Errorf("%s: popped a body of %d bytes, want %d", job.ID, len(got[job.ID]), len(job.Body))
			}
		}
	})
}

// A retry schedule on the real clock, on every backend: a release without
// a delay makes the job due after the schedule's next wait (the last one
// repeating), it is not delivered before, and the release of its last
// attempt dead-letters it.
func TestRetryScheduleOnTheRealClock(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		const attempts = 3
		mustPush(t, q, Job{Topic: "retry", ID: "r", TTR: time.Minute, Retry: []int{1}, MaxAttempts: attempts})
		var due time.Time
		for attempt := 1; attempt <= attempts; attempt++ {
			d := mustPop(t, q, 5*time.Second, "retry")
			if d == nil || d.ID != "r" || d.Attempts != attempt {
				t.Fatalf("delivery %d = %+v", attempt, d)
			}
			if early := time.Until(due); early > 0 {
				t.Fatalf("delivery %d came %v before its due time", attempt, early)
			}
			releasedAt := time.Now()
			state, next, err := q.Release(ctx, "r", nil, attempt)
			if attempt == attempts {
				if err != nil || state != StateDead {
					t.Fatalf("release of the last attempt = %s, %v", state, err)
				}
				break
			}
			if err != nil || state != StateDelay || next.Before(releasedAt.Add(time.Second-10*time.Millisecond)) || next.After(time.Now().Add(time.Second+10*time.Millisecond)) {
				t.Fatalf("release %d = %s due %v, %v; released at %v with a wait of 1s", attempt, state, next, err, releasedAt)
			}
			due = next
		}
		if info, _ := q.Get(ctx, "r"); info == nil || info.State != StateDead || info.DeadReason != ReasonReleased || info.Attempts != attempts {
			t.Fatalf("after the last attempt: %+v", info)
		}
	})
}
