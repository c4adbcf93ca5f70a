package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// scanner moves the due work of one partition: delayed jobs whose time
// came become ready, leases that ran out end their delivery. It sleeps
// until the earliest time it knows of, never longer than the scan interval
// (the safety net that also catches work pushed by other instances), and a
// push due sooner wakes it.
type scanner struct {
	q *Queue
	p *partition

	mu       sync.Mutex
	nextWake time.Time
	// inRound is set while a round runs (from its start to its sleep):
	// wakeBy then notes the earliest time asked in pending, which the
	// round's reply may not know of (a push after its read of the timers).
	inRound bool
	pending time.Time
	poke    chan struct{}

	// recent are the topics the scanner made ready lately, most recent
	// first: movedue.lua gets their wake-up lists, and signals their held
	// pops itself, so that a topic with steady traffic costs no signal.lua
	// call after each move. Guarded by mu.
	recent []string
}

// recentTopics bounds scanner.recent: each costs a key in every movedue
// call.
const recentTopics = 8

func newScanner(q *Queue, p *partition) *scanner {
	return &scanner{q: q, p: p, poke: make(chan struct{}, 1)}
}

// wakeBy makes the scanner run no later than at.
func (s *scanner) wakeBy(at time.Time) {
	s.mu.Lock()
	if s.inRound {
		if s.pending.IsZero() || at.Before(s.pending) {
			s.pending = at
		}
		s.mu.Unlock()
		return
	}
	sooner := at.Before(s.nextWake)
	if sooner {
		s.nextWake = at
	}
	s.mu.Unlock()
	if sooner {
		select {
		case s.poke <- struct{}{}:
		default:
		}
	}
}

// moveResult is one move-due script reply.
type moveResult struct {
	handled   int
	nextDue   int64 // ms, Redis clock; -1 when nothing is scheduled
	nowMicros int64 // Redis clock
	// unexpected are the topics made ready that the call was not given,
	// signalled after it (signal.lua).
	unexpected []string
}

// moveDue runs one movedue.lua call, then wakes the held pops of the
// topics it made ready (signal.lua: their wake-up lists were not known
// before the call). An error names the script that failed.
func (s *scanner) moveDue(ctx context.Context) (moveResult, error) {
	s.mu.Lock()
	expected := s.recent
	s.mu.Unlock()
	reply, err := redis.Values(s.q.call(ctx, s.p, s.q.scripts.moveDue, expected, s.q.opts.MoveBatch))
	if err != nil {
		return moveResult{}, scriptError{"movedue.lua", err}
	}
	if len(reply) < 5 {
		return moveResult{}, fmt.Errorf("movedue.lua: short reply")
	}
	r, err := redis.Int64s(reply[:5], nil)
	if err != nil {
		return moveResult{}, fmt.Errorf("movedue.lua: reply: %w", err)
	}
	if r[3] >= 0 {
		s.q.obs.ScanLag(time.Duration(r[2]-r[3]*1000) * time.Microsecond)
	}
	rest := reply[5:]
	expired := int(r[4])
	if len(rest) < 2*expired {
		return moveResult{}, fmt.Errorf("movedue.lua: short reply")
	}
	for i := 0; i < expired; i++ {
		topic, _ := redis.String(rest[2*i], nil)
		state, _ := redis.String(rest[2*i+1], nil)
		s.q.obs.LeaseExpired(topic)
		if state == StateDead {
			s.q.obs.JobsDeadLettered(topic, 1)
		}
	}
	topics, err := s.q.signalTopics(ctx, s.p, rest[2*expired:])
	if err != nil {
		return moveResult{}, scriptError{"signal.lua", err}
	}
	if len(topics) > 0 {
		s.noteRecent(topics)
	}
	return moveResult{handled: int(r[0]), nextDue: r[1], nowMicros: r[2], unexpected: topics}, nil
}

// noteRecent puts topics first in recent, in a new slice (a call may still
// read the old one).
func (s *scanner) noteRecent(topics []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	recent := slices.Clone(topics)
	for _, t := range s.recent {
		if len(recent) < recentTopics && !slices.Contains(recent, t) {
			recent = append(recent, t)
		}
	}
	s.recent = recent[:min(len(recent), recentTopics)]
}

// signalTopics wakes held pops of the topics a script made ready without
// their wake-up lists: reply is its list "n, then n pairs topic, tokens".
// It returns those topics.
func (q *Queue) signalTopics(ctx context.Context, p *partition, reply []any) ([]string, error) {
	if len(reply) < 1 {
		return nil, fmt.Errorf("signal: short reply")
	}
	n, err := redis.Int(reply[0], nil)
	if err != nil || len(reply) < 1+2*n {
		return nil, fmt.Errorf("signal: malformed reply")
	}
	if n == 0 {
		return nil, nil
	}
	topics := make([]string, n)
	tokens := make([]any, n)
	for i := 0; i < n; i++ {
		topics[i], _ = redis.String(reply[1+2*i], nil)
		tokens[i] = reply[2+2*i]
	}
	_, err = q.call(ctx, p, q.scripts.signal, topics, tokens...)
	return topics, err
}

// scriptError is an error of a loop's round, with the script it ran.
type scriptError struct {
	script string
	err    error
}

func (e scriptError) Error() string { return e.script + ": " + e.err.Error() }
func (e scriptError) Unwrap() error { return e.err }

func (s *scanner) run(ctx context.Context) {
	health := s.q.health.start(LoopScanner)
	defer health.stop()
	interval := s.q.opts.ScanInterval
	timer := time.NewTimer(0)
	defer timer.Stop()
	backoff := 100 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.poke:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
		s.startRound()
		r, err := s.moveDue(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			script := "movedue.lua"
			var se scriptError
			if errors.As(err, &se) {
				script, err = se.script, se.err
			}
			health.failed(script, err)
			s.sleepUntil(timer, time.Now().Add(backoff))
			backoff = min(backoff*2, interval)
			continue
		}
		health.ok()
		backoff = 100 * time.Millisecond
		if r.handled >= s.q.opts.MoveBatch {
			// A full batch: more may be due right now.
			s.sleepUntil(timer, time.Now())
			continue
		}
		wait := interval
		if r.nextDue >= 0 {
			wait = min(wait, untilDue(r.nextDue, r.nowMicros))
		}
		s.sleepUntil(timer, time.Now().Add(wait))
	}
}

// untilDue is how long after Redis' clock read nowMicros (µs) a time due
// in whole ms comes. Counted from when the reply that read the clock
// arrives, the wait ends at or after due on Redis' clock, never before,
// and later only by the reply's time on its way. (From the clock in whole
// ms, rounded down, it ended up to a ms later still: due jobs were made
// ready half a ms late on average.)
func untilDue(dueMs, nowMicros int64) time.Duration {
	return time.Duration(dueMs*1000-nowMicros) * time.Microsecond
}

// startRound marks a round begun: wakeBy notes its times until the round's
// sleepUntil.
func (s *scanner) startRound() {
	s.mu.Lock()
	s.inRound, s.pending = true, time.Time{}
	s.mu.Unlock()
}

// sleepUntil arms the timer for at, or for an earlier time a push asked
// for during the round, and records it as the next wake-up, so that wakeBy
// knows whether a push needs an earlier one.
func (s *scanner) sleepUntil(timer *time.Timer, at time.Time) {
	s.mu.Lock()
	if s.inRound && !s.pending.IsZero() && s.pending.Before(at) {
		at = s.pending
	}
	s.inRound, s.pending = false, time.Time{}
	s.nextWake = at
	s.mu.Unlock()
	timer.Reset(time.Until(at))
}
