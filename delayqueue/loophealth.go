package delayqueue

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Background loop kinds, as named in the logs, the metrics and LoopHealth.
const (
	LoopScanner     = "scanner"
	LoopDispatcher  = "dispatcher"
	LoopDeadSweeper = "dead-sweeper"
)

// Log attribute keys of loop errors.
const (
	logKeyLoop    = "loop"
	logKeyScript  = "script"
	logKeyErr     = "err"
	logKeyRepeats = "repeats"
)

const (
	// loopErrorLogEvery is how often one distinct loop error is logged
	// again while it keeps happening; the repeats in between are counted.
	loopErrorLogEvery = time.Minute
	// maxLoggedLoopErrors bounds the distinct errors remembered for that.
	maxLoggedLoopErrors = 100
)

// LoopStatus is the health of one kind of background loop.
type LoopStatus struct {
	Loop string
	// Behind is how long the most behind of the loop's goroutines has gone
	// without completing a round; 0 while they all wait for work (a
	// dispatcher without held pops).
	Behind time.Duration
	// StaleAfter is how far behind the loop may fall before it is stale.
	StaleAfter time.Duration
}

// Stale reports whether the loop has gone without a completed round for
// longer than it should.
func (s LoopStatus) Stale() bool { return s.Behind > s.StaleAfter }

// LoopHealth reports every kind of background loop, in a fixed order.
func (q *Queue) LoopHealth() []LoopStatus { return q.health.status() }

// loopMonitor watches the engine's background loops: each running loop
// says when it completed a round and when one failed. It logs failures at
// error level, each distinct one at most once per loopErrorLogEvery,
// counts them through the Observer, and tells which loops are stale.
type loopMonitor struct {
	log *slog.Logger
	obs Observer
	now func() time.Time

	mu     sync.Mutex
	kinds  []*loopKind
	logged map[loopErrorKey]*loggedLoopError
}

type loopKind struct {
	name       string
	staleAfter time.Duration
	runs       map[*loopRun]struct{}
}

// loopRun is one running loop goroutine. Its fields are guarded by the
// monitor's mutex.
type loopRun struct {
	m    *loopMonitor
	kind *loopKind
	// since is when the loop last completed a round, or started.
	since time.Time
	// waiting is set while the loop waits for work nobody has asked for.
	waiting bool
}

type loopErrorKey struct{ loop, script, err string }

type loggedLoopError struct {
	at      time.Time
	repeats int
}

// newLoopMonitor watches the loops of kinds (name to the staleness
// threshold), reported in that order.
func newLoopMonitor(logger *slog.Logger, obs Observer, now func() time.Time, kinds ...loopKind) *loopMonitor {
	m := &loopMonitor{log: logger, obs: obs, now: now, logged: make(map[loopErrorKey]*loggedLoopError)}
	for _, k := range kinds {
		m.kinds = append(m.kinds, &loopKind{name: k.name, staleAfter: k.staleAfter, runs: make(map[*loopRun]struct{})})
	}
	return m
}

// start registers a loop goroutine of the named kind; it must call stop
// when it returns.
func (m *loopMonitor) start(kind string) *loopRun {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range m.kinds {
		if k.name == kind {
			r := &loopRun{m: m, kind: k, since: m.now()}
			k.runs[r] = struct{}{}
			return r
		}
	}
	panic("delayqueue: unknown loop kind " + kind)
}

func (r *loopRun) stop() {
	r.m.mu.Lock()
	delete(r.kind.runs, r)
	r.m.mu.Unlock()
}

// ok records a completed round. A wait for work that ended counts as one.
func (r *loopRun) ok() {
	r.m.mu.Lock()
	r.since, r.waiting = r.m.now(), false
	r.m.mu.Unlock()
}

// idle records that the loop waits, however long, for work nobody has
// asked for yet: it is not behind meanwhile. Its next ok ends the wait.
func (r *loopRun) idle() {
	r.m.mu.Lock()
	r.waiting = true
	r.m.mu.Unlock()
}

// failed records a round that failed in script (the script's file, or the
// Redis command of a step that runs none). Every failure is counted; a
// failure to reach Redis is not logged here, since noteRedis logs the
// outage once; any other error is logged at error level, a distinct one at
// most once per loopErrorLogEvery. Errors of a stopping loop are ignored.
func (r *loopRun) failed(script string, err error) {
	if errors.Is(err, context.Canceled) {
		return
	}
	m := r.m
	m.obs.LoopError(r.kind.name)
	if errors.Is(err, ErrUnavailable) {
		return
	}
	key := loopErrorKey{loop: r.kind.name, script: script, err: err.Error()}
	m.mu.Lock()
	now := m.now()
	e := m.logged[key]
	if e != nil && now.Sub(e.at) < loopErrorLogEvery {
		e.repeats++
		m.mu.Unlock()
		return
	}
	repeats := 0
	if e != nil {
		repeats = e.repeats
	} else {
		m.forgetOldErrors(now)
	}
	m.logged[key] = &loggedLoopError{at: now}
	m.mu.Unlock()
	attrs := []slog.Attr{slog.String(logKeyLoop, key.loop), slog.String(logKeyScript, script), slog.String(logKeyErr, key.err)}
	if repeats > 0 {
		attrs = append(attrs, slog.Int(logKeyRepeats, repeats))
	}
	m.log.LogAttrs(context.Background(), slog.LevelError, "background loop failed", attrs...)
}

// forgetOldErrors makes room for one more distinct error: it drops those
// not logged within loopErrorLogEvery, or, when all were, every one (they
// will be logged again).
func (m *loopMonitor) forgetOldErrors(now time.Time) {
	if len(m.logged) < maxLoggedLoopErrors {
		return
	}
	for key, e := range m.logged {
		if now.Sub(e.at) >= loopErrorLogEvery {
			delete(m.logged, key)
		}
	}
	if len(m.logged) >= maxLoggedLoopErrors {
		clear(m.logged)
	}
}

func (m *loopMonitor) status() []LoopStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	out := make([]LoopStatus, 0, len(m.kinds))
	for _, k := range m.kinds {
		s := LoopStatus{Loop: k.name, StaleAfter: k.staleAfter}
		for r := range k.runs {
			if !r.waiting {
				s.Behind = max(s.Behind, now.Sub(r.since))
			}
		}
		out = append(out, s)
	}
	return out
}

// loopKinds are the engine's loops and how far behind each may fall:
//   - a scanner completes a round at least every scan interval (its backoff
//     after a failure is capped there too): stale after about four rounds
//     missed, and never under 5 s;
//   - a dispatcher blocks up to its BLPOP timeout per round, and its read
//     may take 5 s more: stale after five of those and the 5 s;
//   - the dead-letter sweeper runs every deadSweepInterval: stale after
//     three sweeps missed.
func loopKinds(opts Options) []loopKind {
	return []loopKind{
		{name: LoopScanner, staleAfter: max(5*opts.ScanInterval, 5*time.Second)},
		{name: LoopDispatcher, staleAfter: 5*dispatchBlock(opts) + 5*time.Second},
		{name: LoopDeadSweeper, staleAfter: 3 * deadSweepInterval},
	}
}
