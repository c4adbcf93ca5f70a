package delayqueue

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// scanner moves the due ids of one bucket to the ready lists. It sleeps
// until the earliest due time it knows of, never longer than the scan
// interval (the safety net that also catches work pushed by other
// instances), and a push due sooner wakes it.
type scanner struct {
	q      *Queue
	number int
	key    string

	mu       sync.Mutex
	nextWake time.Time
	poke     chan struct{}
}

func newScanner(q *Queue, number int) *scanner {
	return &scanner{q: q, number: number, key: q.keys.bucket(number), poke: make(chan struct{}, 1)}
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
	moved   int
	nextDue int64 // ms, Redis clock; -1 when the bucket is empty
	now     int64 // ms, Redis clock
}

func (s *scanner) moveDue(ctx context.Context) (moveResult, error) {
	reply, err := redis.Values(s.q.eval(ctx, s.q.scripts.moveDue, []string{s.key}, s.q.opts.MoveBatch))
	if err != nil {
		return moveResult{}, err
	}
	if len(reply) < 4 {
		return moveResult{}, fmt.Errorf("move due: short reply")
	}
	r, err := redis.Int64s(reply[:4], nil)
	if err != nil {
		return moveResult{}, fmt.Errorf("move due: reply: %w", err)
	}
	expired, err := redis.Strings(reply[4:], nil)
	if err != nil {
		return moveResult{}, fmt.Errorf("move due: reply: %w", err)
	}
	if r[3] >= 0 {
		s.q.obs.ScanLag(time.Duration(r[2]-r[3]) * time.Millisecond)
	}
	for rest := expired; len(rest) >= 2; rest = rest[2:] {
		s.q.obs.LeaseExpired(rest[0])
		if rest[1] == StateDead {
			s.q.obs.JobsDeadLettered(rest[0], 1)
		}
	}
	return moveResult{moved: int(r[0]), nextDue: r[1], now: r[2]}, nil
}

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
			health.failed(s.q.scripts.name(s.q.scripts.moveDue), err)
			s.sleepUntil(timer, time.Now().Add(backoff))
			backoff = min(backoff*2, interval)
			continue
		}
		health.ok()
		backoff = 100 * time.Millisecond
		if r.moved >= s.q.opts.MoveBatch {
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
