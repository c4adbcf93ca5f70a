package delayqueue

import (
	"context"
	"fmt"
	"sort"

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
