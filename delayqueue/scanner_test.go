package delayqueue

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

func TestScannerRecentTopics(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		before, noted []string
		want          []string
	}{
		{"first topics", nil, []string{"a", "b"}, []string{"a", "b"}},
		{"noted ones go first", []string{"a", "b", "c"}, []string{"c"}, []string{"c", "a", "b"}},
		{"no repeats", []string{"a", "b"}, []string{"b", "a"}, []string{"b", "a"}},
		{"capped, the oldest go", []string{"1", "2", "3", "4", "5", "6", "7", "8"}, []string{"x", "y"},
			[]string{"x", "y", "1", "2", "3", "4", "5", "6"}},
		{"more noted than the cap", nil, []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"},
			[]string{"1", "2", "3", "4", "5", "6", "7", "8"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &scanner{recent: c.before}
			kept := s.recent
			s.noteRecent(c.noted)
			if !slices.Equal(s.recent, c.want) {
				t.Errorf("recent = %v, want %v", s.recent, c.want)
			}
			if !slices.Equal(kept, c.before) {
				t.Errorf("the slice a call may still read changed: %v, was %v", kept, c.before)
			}
		})
	}
}

// A topic the scanner made ready is passed to its next moves, whose script
// signals its held pops itself: no signal.lua call follows them. (The
// queue is not run, so that no scanner but the test's moves its jobs.)
func TestScannerPassesTheTopicsItMadeReady(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := unrunQueueOn(t, r, 3)
		p := q.partitionOf("r1")
		move := func(id string) moveResult {
			t.Helper()
			mustPush(t, q, Job{Topic: "rt", ID: id, Delay: time.Millisecond})
			var res moveResult
			redistest.WaitFor(t, 5*time.Second, id+" made ready", func() bool {
				var err error
				if res, err = p.scanner.moveDue(t.Context()); err != nil {
					t.Fatal(err)
				}
				return res.handled > 0
			})
			return res
		}
		if first := move("r1"); !slices.Equal(first.unexpected, []string{"rt"}) {
			t.Fatalf("the first move signalled %v after the call, want [rt]", first.unexpected)
		}
		r2 := ""
		for i := 0; r2 == ""; i++ {
			if id := fmt.Sprintf("r2-%d", i); q.partitionOf(id) == p {
				r2 = id
			}
		}
		if second := move(r2); len(second.unexpected) != 0 {
			t.Errorf("the second move signalled %v after the call, want none: the topic was passed to it", second.unexpected)
		}
		// Both moves left their token: the second from inside the script.
		if tokens := wakeTokens(t, q, p, "rt"); tokens != 2 {
			t.Errorf("wake-up list of rt holds %d tokens, want 2", tokens)
		}
	})
}

// A move that handles a topic's due jobs in full and, in the same call,
// reschedules one of its ended leases keeps the topic's timer for the job
// it rescheduled: the timer is set to its next entry, or removed, only as
// far as the call's own rescheduling allows. (Not run, so that the test's
// moves are the only ones.)
func TestMoveKeepsTheTimerOfAJobItRescheduled(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := unrunQueueOn(t, r, 1)
		ctx := t.Context()
		p := q.partitions[0]
		mustPush(t, q, Job{Topic: "rs", ID: "a", TTR: time.Second, Retry: []int{1}})
		if d := mustPop(t, q, 0, "rs"); d == nil || d.ID != "a" {
			t.Fatalf("pop = %+v, want a", d)
		}
		mustPush(t, q, Job{Topic: "rs", ID: "b", Delay: time.Second})
		// Both a's lease and b's delay end within a second and a few ms.
		bothDue := time.Now().Add(time.Second + 50*time.Millisecond)
		redistest.WaitFor(t, 5*time.Second, "a's lease and b's delay over", func() bool { return time.Now().After(bothDue) })
		res, err := p.scanner.moveDue(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if res.handled != 2 {
			t.Fatalf("the move handled %d jobs, want 2: a's ended lease and b", res.handled)
		}
		if d := mustPop(t, q, 0, "rs"); d == nil || d.ID != "b" {
			t.Fatalf("pop = %+v, want b", d)
		}
		// a comes back after its retry interval, found by its timer.
		redistest.WaitFor(t, 10*time.Second, "a delivered again", func() bool {
			if _, err := p.scanner.moveDue(ctx); err != nil {
				t.Fatal(err)
			}
			d := mustPop(t, q, 0, "rs")
			return d != nil && d.ID == "a"
		})
	})
}

func TestUntilDue(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name             string
		dueMs, nowMicros int64
		want             time.Duration
	}{
		{"due in the next ms, read late in this one", 1001, 1_000_700, 300 * time.Microsecond},
		{"due in the next ms, read at its start", 1001, 1_000_000, time.Millisecond},
		{"due later", 1500, 1_000_250, 499750 * time.Microsecond},
		{"due now", 1000, 1_000_000, 0},
		{"past due", 999, 1_000_400, -1400 * time.Microsecond},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := untilDue(c.dueMs, c.nowMicros); got != c.want {
				t.Errorf("untilDue(%d, %d) = %v, want %v", c.dueMs, c.nowMicros, got, c.want)
			}
		})
	}
}

// push.lua and movedue.lua report Redis' clock in microseconds, which the
// server's timers count from: the test's clock and Redis' are the same
// host's, so the reading falls between the test's readings before and
// after the call (give or take a clock step, far less than the factor of
// a thousand a reading in ms would be off by).
func TestScriptsReadTheClockInMicroseconds(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := unrunQueueOn(t, r, 1)
		p := q.partitions[0]
		within := func(what string, before time.Time, micros int64) {
			t.Helper()
			after := time.Now()
			const slack = time.Minute
			if got := time.UnixMicro(micros); got.Before(before.Add(-slack)) || got.After(after.Add(slack)) {
				t.Errorf("%s read the clock as %d µs (%v), want between %v and %v", what, micros, got, before, after)
			}
		}
		before := time.Now()
		replies, err := q.execPushes(t.Context(), p, []pushCall{{jobs: []*Job{{Topic: "clock", ID: "c1", Delay: time.Second, TTR: time.Minute}}}})
		if err != nil {
			t.Fatal(err)
		}
		within("push.lua", before, replies[0].nowMicros)
		if due := replies[0].dueAndStatus[0]; untilDue(due, replies[0].nowMicros) <= 0 || untilDue(due, replies[0].nowMicros) > time.Second+time.Millisecond {
			t.Errorf("push.lua: due %d ms is %v after its clock, want (0, 1.001s]", due, untilDue(due, replies[0].nowMicros))
		}
		before = time.Now()
		res, err := p.scanner.moveDue(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		within("movedue.lua", before, res.nowMicros)
	})
}

// A push due sooner than the scanner's next wake-up, asked for while a
// round runs (after the round read the timers, so its reply does not know
// of it), still sets the round's sleep; outside a round it wakes the
// scanner at once.
func TestScannerKeepsAWakeUpAskedDuringARound(t *testing.T) {
	t.Parallel()
	s := newScanner(nil, nil)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	now := time.Now()
	s.sleepUntil(timer, now.Add(-time.Millisecond)) // the wake-up that started the round, past

	s.startRound()
	s.wakeBy(now.Add(time.Hour))
	s.wakeBy(now.Add(30 * time.Minute)) // the earliest asked wins
	s.sleepUntil(timer, now.Add(2*time.Hour))
	if want := now.Add(30 * time.Minute); !s.nextWake.Equal(want) {
		t.Fatalf("after a round with a push due in 30 min, the scanner sleeps until %v, want %v", s.nextWake, want)
	}
	select {
	case <-s.poke:
		t.Fatal("a wake-up asked during the round poked the scanner: it is taken into the round's sleep")
	default:
	}

	s.startRound()
	s.sleepUntil(timer, now.Add(time.Hour)) // nothing asked: the round's own time
	if want := now.Add(time.Hour); !s.nextWake.Equal(want) {
		t.Fatalf("after a round with no push, the scanner sleeps until %v, want %v", s.nextWake, want)
	}
	s.wakeBy(now.Add(time.Minute))
	select {
	case <-s.poke:
	default:
		t.Fatal("a push due sooner, between rounds, did not poke the scanner")
	}
}
