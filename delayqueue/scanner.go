package delayqueue

import (
	"context"
	"errors"
	"fmt"
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
	poke     chan struct{}
}

func newScanner(q *Queue, p *partition) *scanner {
	return &scanner{q: q, p: p, poke: make(chan struct{}, 1)}
}

// wakeBy makes the scanner run no later than at.
func (s *scanner) wakeBy(at time.Time) {
	s.mu.Lock()
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
	handled int
	nextDue int64 // ms, Redis clock; -1 when nothing is scheduled
	now     int64 // ms, Redis clock
}

// moveDue runs one movedue.lua call, then wakes the held pops of the
// topics it made ready (signal.lua: their wake-up lists were not known
// before the call). An error names the script that failed.
func (s *scanner) moveDue(ctx context.Context) (moveResult, error) {
	reply, err := redis.Values(s.q.call(ctx, s.p, s.q.scripts.moveDue, nil, s.q.opts.MoveBatch))
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
		s.q.obs.ScanLag(time.Duration(r[2]-r[3]) * time.Millisecond)
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
	if err := s.q.signalTopics(ctx, s.p, rest[2*expired:]); err != nil {
		return moveResult{}, scriptError{"signal.lua", err}
	}
	return moveResult{handled: int(r[0]), nextDue: r[1], now: r[2]}, nil
}

// signalTopics wakes held pops of the topics a script made ready without
// their wake-up lists: reply is its list "n, then n pairs topic, tokens".
func (q *Queue) signalTopics(ctx context.Context, p *partition, reply []any) error {
	if len(reply) < 1 {
		return fmt.Errorf("signal: short reply")
	}
	n, err := redis.Int(reply[0], nil)
	if err != nil || len(reply) < 1+2*n {
		return fmt.Errorf("signal: malformed reply")
	}
	if n == 0 {
		return nil
	}
	topics := make([]string, n)
	tokens := make([]any, n)
	for i := 0; i < n; i++ {
		topics[i], _ = redis.String(reply[1+2*i], nil)
		tokens[i] = reply[2+2*i]
	}
	_, err = q.call(ctx, p, q.scripts.signal, topics, tokens...)
	return err
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
			if d := time.Duration(r.nextDue-r.now) * time.Millisecond; d < wait {
				wait = d
			}
		}
		s.sleepUntil(timer, time.Now().Add(wait))
	}
}

// sleepUntil arms the timer for at and records it as the next wake-up, so
// that wakeBy knows whether a push needs an earlier one.
func (s *scanner) sleepUntil(timer *time.Timer, at time.Time) {
	s.mu.Lock()
	s.nextWake = at
	s.mu.Unlock()
	timer.Reset(time.Until(at))
}
