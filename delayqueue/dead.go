package delayqueue

import (
	"context"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"
)

// MaxDeadPage bounds one page of DeadList and one kick by count.
const MaxDeadPage = 1000

// deadSweepInterval is how often the dead letters' time to live is enforced
// for every topic (it is also enforced whenever a job dies).
const deadSweepInterval = time.Minute

// DeadList returns a topic's dead letters, newest first, and how many there
// are in all.
func (q *Queue) DeadList(ctx context.Context, topic string, offset, limit int) ([]JobInfo, int, error) {
	if offset < 0 || limit < 1 || limit > MaxDeadPage {
		return nil, 0, fmt.Errorf("dead list: %w: offset must be 0 or more and limit 1 to %d", ErrInvalidJob, MaxDeadPage)
	}
	var (
		total int
		jobs  []JobInfo
	)
	err := q.withConn(ctx, func(c redis.Conn) error {
		var err error
		if total, err = redis.Int(c.Do("ZCARD", q.keys.dead(topic))); err != nil {
			return err
		}
		ids, err := redis.Strings(c.Do("ZREVRANGE", q.keys.dead(topic), offset, offset+limit-1))
		if err != nil {
			return err
		}
		for _, id := range ids {
			if err := c.Send("HGETALL", q.keys.job(id)); err != nil {
				return err
			}
		}
		if err := c.Flush(); err != nil {
			return err
		}
		for _, id := range ids {
			fields, err := redis.StringMap(c.Receive())
			if err != nil {
				return err
			}
			if len(fields) > 0 {
				jobs = append(jobs, *jobInfoFromFields(id, fields))
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("dead list %s: %w", topic, err)
	}
	return jobs, total, nil
}

// DeadKick sends a topic's dead letters back to ready with their attempts
// reset: the job id, or (id "") the count oldest. It returns the ids kicked.
func (q *Queue) DeadKick(ctx context.Context, topic, id string, count int) ([]string, error) {
	if id == "" && (count < 1 || count > MaxDeadPage) {
		return nil, fmt.Errorf("dead kick: %w: count must be 1 to %d", ErrInvalidJob, MaxDeadPage)
	}
	kicked, err := redis.Strings(q.evalAck(ctx, q.scripts.kick, nil, topic, id, count))
	if err != nil {
		return nil, fmt.Errorf("dead kick %s: %w", topic, err)
	}
	return kicked, nil
}

// DeadDelete deletes one dead letter of a topic, or (id "") all of them.
// It returns how many it deleted.
func (q *Queue) DeadDelete(ctx context.Context, topic, id string) (int, error) {
	total := 0
	for {
		n, err := redis.Int(q.evalAck(ctx, q.scripts.deadDelete, nil, topic, id, MaxDeadPage))
		if err != nil {
			return total, fmt.Errorf("dead delete %s: %w", topic, err)
		}
		total += n
		if id != "" || n == 0 {
			return total, nil
		}
	}
}

// sweepDeadLetters enforces the dead letters' time to live for every topic,
// now and then, so old dead letters go even when no new job dies.
func (q *Queue) sweepDeadLetters(ctx context.Context) {
	health := q.health.start(LoopDeadSweeper)
	defer health.stop()
	ticker := time.NewTicker(deadSweepInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if script, err := q.sweepDeadLettersOnce(ctx); err != nil {
			health.failed(script, err)
			continue
		}
		health.ok()
	}
}

// sweepDeadLettersOnce is one sweep of every topic. On failure it names the
// script or command that failed.
func (q *Queue) sweepDeadLettersOnce(ctx context.Context) (string, error) {
	topics, err := q.Topics(ctx)
	if err != nil {
		return "SMEMBERS", err
	}
	for start := 0; start < len(topics); start += 100 {
		batch := topics[start:min(start+100, len(topics))]
		args := make([]any, len(batch))
		for i, t := range batch {
			args[i] = t
		}
		if _, err := q.eval(ctx, q.scripts.deadSweep, nil, args...); err != nil {
			return q.scripts.name(q.scripts.deadSweep), err
		}
	}
	return "", nil
}
