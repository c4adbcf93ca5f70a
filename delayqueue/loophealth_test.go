package delayqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// recordedLog keeps the records logged through it, and passes them on to
// the test's log.
type recordedLog struct {
	mu      sync.Mutex
	records []slog.Record
	next    slog.Handler
}

func (h *recordedLog) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordedLog) Handle(ctx context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return h.next.Handle(ctx, r)
}

func (h *recordedLog) WithAttrs([]slog.Attr) slog.Handler { panic("not used by the engine") }
func (h *recordedLog) WithGroup(string) slog.Handler      { panic("not used by the engine") }

// lines renders the records at level or above in the text format, without
// the time: level=ERROR msg=... key=value...
func (h *recordedLog) lines(level slog.Level) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		if r.Level < level {
			continue
		}
		var buf bytes.Buffer
		text := slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		}})
		_ = text.Handle(context.Background(), r)
		out = append(out, strings.TrimSuffix(buf.String(), "\n"))
	}
	return out
}

func newRecordedLog(t testing.TB) *recordedLog {
	return &recordedLog{next: redistest.LogHandler(t, slog.LevelDebug)}
}

// testClock is a clock the test moves.
type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *testClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newTestMonitor(t *testing.T) (*loopMonitor, *recordedLog, *recordingObserver, *testClock) {
	logs := newRecordedLog(t)
	obs := &recordingObserver{counts: map[string]int{}}
	clock := &testClock{now: time.Unix(1_700_000_000, 0)}
	m := newLoopMonitor(slog.New(logs), obs, clock.Now,
		loopKind{name: LoopScanner, staleAfter: 5 * time.Second},
		loopKind{name: LoopDispatcher, staleAfter: 10 * time.Second})
	return m, logs, obs, clock
}

// A distinct error is logged at error level at once, naming the loop and
// the script; its repeats within a minute are counted but not logged, and
// the next log line after that says how many there were. Connection errors
// are counted, not logged; a stopping loop's are not even counted.
func TestLoopFailuresAreLoggedOncePerDistinctError(t *testing.T) {
	t.Parallel()
	m, logs, obs, clock := newTestMonitor(t)
	scanner, other, dispatcher := m.start(LoopScanner), m.start(LoopScanner), m.start(LoopDispatcher)
	noperm := redis.Error("NOPERM this user has no permissions to run the 'rpush' command")

	scanner.failed("movedue.lua", noperm)
	other.failed("movedue.lua", noperm) // another bucket, same error
	clock.advance(30 * time.Second)
	scanner.failed("movedue.lua", noperm)
	dispatcher.failed("claim.lua", noperm)
	scanner.failed("movedue.lua", redis.Error("ERR something else"))
	scanner.failed("movedue.lua", fmt.Errorf("%w: dial tcp 127.0.0.1:1: connection refused", ErrUnavailable))
	scanner.failed("movedue.lua", fmt.Errorf("move due: %w", context.Canceled))
	clock.advance(31 * time.Second)
	scanner.failed("movedue.lua", noperm)

	const line = `level=ERROR msg="background loop failed" `
	want := []string{
		line + `loop=scanner script=movedue.lua err="NOPERM this user has no permissions to run the 'rpush' command"`,
		line + `loop=dispatcher script=claim.lua err="NOPERM this user has no permissions to run the 'rpush' command"`,
		line + `loop=scanner script=movedue.lua err="ERR something else"`,
		line + `loop=scanner script=movedue.lua err="NOPERM this user has no permissions to run the 'rpush' command" repeats=2`,
	}
	got := logs.lines(slog.LevelError)
	if !slices.Equal(got, want) {
		t.Errorf("error lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if n := obs.get("loop-error/" + LoopScanner); n != 6 {
		t.Errorf("scanner errors counted %d, want 6 (the canceled one not)", n)
	}
	if n := obs.get("loop-error/" + LoopDispatcher); n != 1 {
		t.Errorf("dispatcher errors counted %d, want 1", n)
	}
}

// The distinct errors remembered are bounded: a stream of ever-new errors
// does not grow the monitor.
func TestLoopErrorMemoryIsBounded(t *testing.T) {
	t.Parallel()
	m, logs, _, _ := newTestMonitor(t)
	r := m.start(LoopScanner)
	for i := range 3 * maxLoggedLoopErrors {
		r.failed("movedue.lua", fmt.Errorf("error %d", i))
	}
	if n := len(m.logged); n > maxLoggedLoopErrors {
		t.Errorf("%d distinct errors remembered, want at most %d", n, maxLoggedLoopErrors)
	}
	if n := len(logs.lines(slog.LevelError)); n != 3*maxLoggedLoopErrors {
		t.Errorf("%d lines logged, want one per distinct error (%d)", n, 3*maxLoggedLoopErrors)
	}
}

func TestLoopStaleness(t *testing.T) {
	t.Parallel()
	m, _, _, clock := newTestMonitor(t)
	status := func() map[string]LoopStatus {
		out := map[string]LoopStatus{}
		for _, s := range m.status() {
			out[s.Loop] = s
		}
		return out
	}
	check := func(step string, wantBehind map[string]time.Duration, wantStale map[string]bool) {
		t.Helper()
		for loop, s := range status() {
			if s.Behind != wantBehind[loop] || s.Stale() != wantStale[loop] {
				t.Errorf("%s: %s behind %v stale %v, want %v %v", step, loop, s.Behind, s.Stale(), wantBehind[loop], wantStale[loop])
			}
		}
	}
	check("nothing started", nil, nil)

	a, b := m.start(LoopScanner), m.start(LoopScanner)
	d := m.start(LoopDispatcher)
	d.idle()
	clock.advance(4 * time.Second)
	a.ok()
	clock.advance(2 * time.Second)
	// b has gone 6 s without a round: the scanner is as behind as b.
	check("one scanner behind", map[string]time.Duration{LoopScanner: 6 * time.Second}, map[string]bool{LoopScanner: true})

	b.failed("movedue.lua", errors.New("ERR boom"))
	check("a failure is no round", map[string]time.Duration{LoopScanner: 6 * time.Second}, map[string]bool{LoopScanner: true})

	b.ok()
	clock.advance(time.Hour)
	d.ok() // the idle wait ended: a dispatcher that waited an hour is not behind
	a.ok()
	b.ok()
	check("all caught up", nil, nil)

	clock.advance(11 * time.Second)
	a.ok()
	b.ok()
	check("dispatcher behind", map[string]time.Duration{LoopDispatcher: 11 * time.Second}, map[string]bool{LoopDispatcher: true})

	d.stop()
	check("a stopped loop is not reported", nil, nil)
}

// The scanner's script refused by Redis (an ACL user denied ZRANGEBYSCORE,
// which movedue.lua uses to find the due topics) shows at error level, naming the
// loop and the script, and in the loop error count, within seconds; pushes
// of delayed jobs still work. On one server, with an ACL user of its own
// (the shared cluster's nodes are not reconfigured by tests).
func TestScannerErrorsShowWhenRedisRefusesACommand(t *testing.T) {
	t.Parallel()
	_, ro := serverDenying(t, "zrangebyscore")
	logs := newRecordedLog(t)
	obs := &recordingObserver{counts: map[string]int{}}
	q := startQueue(t, ro, Options{BucketSize: 1, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: 30 * time.Second, Observer: obs}, slog.New(logs))

	mustPush(t, q, Job{Topic: "acl", ID: "1", Delay: 200 * time.Millisecond})
	redistest.WaitFor(t, 5*time.Second, "the scanner's error at error level, and counted", func() bool {
		for _, line := range logs.lines(slog.LevelError) {
			// Redis says the user "can't run this command", Valkey that it
			// has "no permissions to run" it.
			refused := strings.Contains(line, "can't run this command") || strings.Contains(line, "no permissions to run")
			if strings.Contains(line, "loop=scanner script=movedue.lua") && refused {
				return obs.get("loop-error/"+LoopScanner) > 0
			}
		}
		return false
	})
}
