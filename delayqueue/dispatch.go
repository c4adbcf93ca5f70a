package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// dispatchLoop is one shared blocking Redis loop. It waits with BLPOP on the
// wake-up lists of the topics it serves that have held Pops in this process,
// and for each token claims a job for the first waiter of that topic. A few
// loops serve any number of waiters and topics, so held Pops cost no Redis
// connection each.
//
// Tokens only wake; the claim script decides. A token lost with a killed
// process delays a wake-up by at most one blocking timeout, after which the
// loop tries every topic it serves anyway.
type dispatchLoop struct {
	q       *Queue
	index   int
	control string

	mu      sync.Mutex
	blocked bool
}

func newDispatchLoop(q *Queue, index int) *dispatchLoop {
	return &dispatchLoop{q: q, index: index, control: q.keys.control(q.instance, index)}
}

func (l *dispatchLoop) setBlocked(b bool) {
	l.mu.Lock()
	l.blocked = b
	l.mu.Unlock()
}

// interrupt ends the loop's current BLPOP so it listens to a new topic.
func (l *dispatchLoop) interrupt() {
	l.mu.Lock()
	blocked := l.blocked
	l.mu.Unlock()
	if !blocked {
		return // it reads its topics again before it blocks
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.q.withConn(ctx, func(c redis.Conn) error {
		if err := c.Send("LPUSH", l.control, "1"); err != nil {
			return err
		}
		// A process killed with a token here leaves nothing for long.
		_, err := c.Do("PEXPIRE", l.control, 60000)
		return err
	})
}

func (l *dispatchLoop) run(ctx context.Context) {
	health := l.q.health.start(LoopDispatcher)
	defer health.stop()
	var conn redis.Conn
	defer func() {
		if conn != nil {
			conn.Close()
		}
	}()
	changed := l.q.waiters.changed[l.index]
	wait := l.q.opts.ScanInterval
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		l.setBlocked(true)
		topics := l.q.waiters.topicsOf(l.index)
		if len(topics) == 0 {
			l.setBlocked(false)
			health.idle()
			select {
			case <-changed:
			case <-ctx.Done():
			}
			health.ok()
			continue
		}
		if conn == nil {
			c, err := l.q.opts.Dial()
			if err != nil {
				l.setBlocked(false)
				l.q.noteRedis(err)
				health.failed("BLPOP", fmt.Errorf("%w: %w", ErrUnavailable, err))
				l.sleep(ctx, backoff)
				backoff = min(backoff*2, wait)
				continue
			}
			conn = c
		}
		args := make([]any, 0, len(topics)+2)
		for _, t := range topics {
			args = append(args, l.q.keys.wake(t))
		}
		args = append(args, l.control, int(dispatchBlock(l.q.opts)/time.Second))
		reply, err := redis.Strings(redis.DoWithTimeout(conn, wait+5*time.Second, "BLPOP", args...))
		l.setBlocked(false)
		switch {
		case err == redis.ErrNil:
			// Timed out: the safety net. Try every topic, in case a token was
			// lost with a killed process or a dropped connection.
			l.q.noteRedis(nil)
			err = l.serveEvery(ctx, topics, health)
		case err != nil:
			conn.Close()
			conn = nil
			loopErr := blockingError(err)
			if errors.Is(loopErr, ErrUnavailable) {
				l.q.noteRedis(err)
			} else {
				l.q.noteRedis(nil) // Redis answered, with an error
			}
			health.failed("BLPOP", loopErr)
			l.sleep(ctx, backoff)
			backoff = min(backoff*2, wait)
			continue
		default:
			backoff = 100 * time.Millisecond
			l.q.noteRedis(nil)
			if reply[0] != l.control {
				_, err = l.serve(ctx, strings.TrimPrefix(reply[0], l.q.keys.wakePrefix()))
			}
		}
		if err != nil {
			health.failed(l.q.scripts.name(l.q.scripts.claim), err)
			continue
		}
		health.ok()
	}
}

// dispatchBlock is how long one BLPOP of a dispatch loop blocks: the scan
// interval, in whole seconds, at least one.
func dispatchBlock(opts Options) time.Duration {
	return max(opts.ScanInterval.Truncate(time.Second), time.Second)
}

// blockingError is err, of a loop's own connection, wrapped in
// ErrUnavailable unless Redis answered it (as withConn does for pooled
// ones).
func blockingError(err error) error {
	var redisErr redis.Error
	if errors.As(err, &redisErr) && !transientRedisError(redisErr) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// serveEvery serves every topic until none hands out a job. Each serve
// that handed some out counts as a round, so that a long burst does not
// make the loop look stuck.
func (l *dispatchLoop) serveEvery(ctx context.Context, topics []string, health *loopRun) error {
	for _, t := range topics {
		for {
			served, err := l.serve(ctx, t)
			if err != nil {
				return err
			}
			if !served {
				break
			}
			health.ok()
		}
	}
	return nil
}

// serveRounds bounds the claim rounds of one serve, so that a topic with a
// long burst does not keep a loop from its other topics: the burst's
// remaining tokens bring the loop back to it.
const serveRounds = 10

// serve claims jobs for the waiters of topic, first come first served. A
// token says a job is ready, not how many: serve claims for the first
// waiter, and while every waiter of a round got all it asked for (more may
// be ready, as in a burst), for twice as many waiters in the next round,
// all in one script call. It reports whether a job was handed out, and the
// error of a claim that failed.
func (l *dispatchLoop) serve(ctx context.Context, topic string) (bool, error) {
	served := false
	for round, jobs := 0, 1; round < serveRounds; round, jobs = round+1, min(2*jobs, maxClaimsPerCall) {
		ws := l.q.waiters.checkout(topic, jobs)
		if len(ws) == 0 {
			if !served {
				l.returnToken(topic)
			}
			return served, nil
		}
		all, some, err := l.claimFor(topic, ws)
		served = served || some
		if err != nil || !all || ctx.Err() != nil {
			return served, err
		}
	}
	return served, nil
}

// returnToken gives back a token the loop took for a topic whose waiters
// left meanwhile, for other instances' waiters.
func (l *dispatchLoop) returnToken(topic string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.q.withConn(ctx, func(c redis.Conn) error {
		_, err := c.Do("RPUSH", l.q.keys.wake(topic), "1")
		return err
	})
}

// claimFor runs one claim for checked-out waiters and hands each its jobs.
// Those left empty-handed queue again at the front, in their order. all
// reports whether every waiter got as many jobs as it asked for; some,
// whether any got one; err, why the claim failed.
func (l *dispatchLoop) claimFor(topic string, ws []*waiter) (all, some bool, err error) {
	calls := make([]claimCall, len(ws))
	for i, w := range ws {
		calls[i] = claimCall{topics: w.topics, count: w.count}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	results, err := l.q.execClaims(ctx, calls)
	if err != nil {
		results = make([][]*Delivery, len(ws))
	}
	all = true
	// Checked in last to first, so that they keep their order at the front.
	for i := len(ws) - 1; i >= 0; i-- {
		w, ds := ws[i], results[i]
		if len(ds) < w.count {
			all = false
		}
		if len(ds) == 0 {
			l.q.wakeLoops(l.q.waiters.checkin(w, err))
			continue
		}
		l.q.noteDelivered(ds)
		w.result <- popResult{deliveries: ds}
		some = true
	}
	return all, some, err
}

func (l *dispatchLoop) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
