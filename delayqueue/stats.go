package delayqueue

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"
)

// TopicStats counts a topic's jobs in each state. The counters are kept by
// the same scripts that change the states, so reading them costs
// O(topics), not a scan of the jobs.
type TopicStats struct {
	Delay    int64 `json:"delay"`
	Ready    int64 `json:"ready"`
	Reserved int64 `json:"reserved"`
	Dead     int64 `json:"dead"`
}

// Topics lists the topics that hold jobs, sorted.
func (q *Queue) Topics(ctx context.Context) ([]string, error) {
	var topics []string
	err := q.withConn(ctx, func(c redis.Conn) error {
		var err error
		topics, err = redis.Strings(c.Do("SMEMBERS", q.keys.topics()))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("topics: %w", err)
	}
	sort.Strings(topics)
	return topics, nil
}

// Stats returns the counters of one topic, or of every topic when topic is
// "".
func (q *Queue) Stats(ctx context.Context, topic string) (map[string]TopicStats, error) {
	topics := []string{topic}
	if topic == "" {
		var err error
		if topics, err = q.Topics(ctx); err != nil {
			return nil, err
		}
	}
	stats := make(map[string]TopicStats, len(topics))
	err := q.withConn(ctx, func(c redis.Conn) error {
		for _, t := range topics {
			if err := c.Send("HGETALL", q.keys.count(t)); err != nil {
				return err
			}
		}
		if err := c.Flush(); err != nil {
			return err
		}
		for _, t := range topics {
			m, err := redis.Int64Map(c.Receive())
			if err != nil {
				return err
			}
			stats[t] = TopicStats{Delay: m[StateDelay], Ready: m[StateReady], Reserved: m[StateReserved], Dead: m[StateDead]}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return stats, nil
}

// DeadDropped returns, per topic, how many dead letters were dropped over
// the cap or past their time to live, since the counters began (shared by
// every instance).
func (q *Queue) DeadDropped(ctx context.Context) (map[string]int64, error) {
	var dropped map[string]int64
	err := q.withConn(ctx, func(c redis.Conn) error {
		var err error
		dropped, err = redis.Int64Map(c.Do("HGETALL", q.keys.deadDropped()))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dead dropped: %w", err)
	}
	return dropped, nil
}

// Ready checks that Redis answers and holds every script, loading any it
// lost (a restart or SCRIPT FLUSH): the server can serve.
func (q *Queue) Ready(ctx context.Context) error {
	return q.withConn(ctx, func(c redis.Conn) error {
		all := q.scripts.all()
		args := make([]any, 0, len(all)+1)
		args = append(args, "EXISTS")
		for _, s := range all {
			args = append(args, s.Hash())
		}
		exists, err := redis.Ints(c.Do("SCRIPT", args...))
		if err != nil {
			return err
		}
		for i, ok := range exists {
			if ok == 0 {
				if err := all[i].Load(c); err != nil {
					return fmt.Errorf("load script: %w", err)
				}
			}
		}
		return nil
	})
}

// MaxUpcomingSlots bounds the slots of one Upcoming call.
const MaxUpcomingSlots = 1440

// Upcoming counts the entries of every bucket due in each of n slots of step
// from now (Redis' clock): delayed jobs by due time and reserved jobs by the
// end of their lease. It costs n ZCOUNTs per bucket, pipelined, whatever the
// number of jobs. It returns the start of the first slot.
func (q *Queue) Upcoming(ctx context.Context, step time.Duration, n int) (time.Time, []int64, error) {
	if n < 1 || n > MaxUpcomingSlots || step < time.Second {
		return time.Time{}, nil, fmt.Errorf("upcoming: %w: 1 to %d slots of at least 1s are needed", ErrInvalidJob, MaxUpcomingSlots)
	}
	counts := make([]int64, n)
	var start int64
	err := q.withConn(ctx, func(c redis.Conn) error {
		t, err := redis.Int64s(c.Do("TIME"))
		if err != nil {
			return err
		}
		start = t[0]*1000 + t[1]/1000
		stepMs := step.Milliseconds()
		for b := 1; b <= q.opts.BucketSize; b++ {
			for i := 0; i < n; i++ {
				lo := start + int64(i)*stepMs
				if err := c.Send("ZCOUNT", q.keys.bucket(b), lo, "("+strconv.FormatInt(lo+stepMs, 10)); err != nil {
					return err
				}
			}
		}
		if err := c.Flush(); err != nil {
			return err
		}
		for b := 1; b <= q.opts.BucketSize; b++ {
			for i := 0; i < n; i++ {
				v, err := redis.Int64(c.Receive())
				if err != nil {
					return err
				}
				counts[i] += v
			}
		}
		return nil
	})
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("upcoming: %w", err)
	}
	return time.UnixMilli(start), counts, nil
}
