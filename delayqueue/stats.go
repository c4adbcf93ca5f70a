package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// TopicStats counts a topic's jobs in each state. The counters are kept by
// the same scripts that change the states, so reading them costs
// O(topics), not a scan of the jobs. /stats answers them as
// wire.TopicStats.
type TopicStats struct {
	Delay    int64
	Ready    int64
	Reserved int64
	Dead     int64
}

func (s *TopicStats) add(o TopicStats) {
	s.Delay += o.Delay
	s.Ready += o.Ready
	s.Reserved += o.Reserved
	s.Dead += o.Dead
}

// partitionCounts is one partition's counts hash, read.
type partitionCounts struct {
	topics  map[string]TopicStats
	dropped map[string]int64 // dead letters dropped, per topic holding dead letters
	// droppedTotal counts the partition's dropped dead letters of every
	// topic, those gone since included.
	droppedTotal int64
}

// partitionCounts reads p's counts hash: fields "<state>,<topic>",
// "dropped,<topic>", "dropped" and "seq" (see scripts/lib.lua).
func (q *Queue) partitionCounts(ctx context.Context, p *partition) (partitionCounts, error) {
	var fields map[string]string
	err := q.withConn(ctx, p.key(), func(c redis.Conn) error {
		var err error
		fields, err = redis.StringMap(c.Do("HGETALL", p.keyAt(keyCounts)))
		return err
	})
	if err != nil {
		return partitionCounts{}, err
	}
	pc := partitionCounts{topics: make(map[string]TopicStats), dropped: make(map[string]int64)}
	for field, value := range fields {
		n, _ := strconv.ParseInt(value, 10, 64)
		kind, topic, ok := strings.Cut(field, ",")
		if !ok {
			if field == "dropped" {
				pc.droppedTotal = n
			}
			continue
		}
		s := pc.topics[topic]
		switch kind {
		case StateDelay:
			s.Delay = n
		case StateReady:
			s.Ready = n
		case StateReserved:
			s.Reserved = n
		case StateDead:
			s.Dead = n
		case "dropped":
			pc.dropped[topic] = n
			continue
		default:
			continue
		}
		pc.topics[topic] = s
	}
	return pc, nil
}

// allCounts reads every partition's counts, at once.
func (q *Queue) allCounts(ctx context.Context) ([]partitionCounts, error) {
	if err := q.layoutStale(); err != nil {
		return nil, err
	}
	all := make([]partitionCounts, len(q.partitions))
	err := q.eachPartition(ctx, func(p *partition) error {
		pc, err := q.partitionCounts(ctx, p)
		all[p.number-1] = pc
		return err
	})
	return all, err
}

// Topics lists the topics that hold jobs, sorted.
func (q *Queue) Topics(ctx context.Context) ([]string, error) {
	all, err := q.allCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("topics: %w", err)
	}
	seen := make(map[string]bool)
	var topics []string
	for _, pc := range all {
		for t := range pc.topics {
			if !seen[t] {
				seen[t] = true
				topics = append(topics, t)
			}
		}
	}
	sort.Strings(topics)
	return topics, nil
}

// Stats returns the counters of one topic, or of every topic when topic is
// "", summed over the partitions.
func (q *Queue) Stats(ctx context.Context, topic string) (map[string]TopicStats, error) {
	all, err := q.allCounts(ctx)
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	stats := make(map[string]TopicStats)
	if topic != "" {
		stats[topic] = TopicStats{}
	}
	for _, pc := range all {
		for t, s := range pc.topics {
			if topic != "" && t != topic {
				continue
			}
			sum := stats[t]
			sum.add(s)
			stats[t] = sum
		}
	}
	return stats, nil
}

// DeadDropped returns, per topic holding jobs, how many of its dead
// letters were dropped over the cap or past their time to live, and how
// many were dropped in all, those of topics since gone included (shared
// by every instance).
func (q *Queue) DeadDropped(ctx context.Context) (map[string]int64, int64, error) {
	all, err := q.allCounts(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("dead dropped: %w", err)
	}
	dropped := make(map[string]int64)
	var total int64
	for _, pc := range all {
		for t, n := range pc.dropped {
			dropped[t] += n
		}
		total += pc.droppedTotal
	}
	return dropped, total, nil
}

// Ready checks that the engine can serve: the migrations are done, and
// every partition's Redis serves its keys and holds every script (it loads
// any it lost: a restart or SCRIPT FLUSH).
func (q *Queue) Ready(ctx context.Context) error {
	// A probe right after start-up waits for an empty database's quick
	// migration; a longer one answers ErrStarting.
	if err := q.started(ctx); err != nil {
		if errors.Is(err, ErrLayout) {
			return err
		}
		return ErrStarting
	}
	return q.eachPartition(ctx, func(p *partition) error {
		return q.withConn(ctx, p.key(), func(c redis.Conn) error {
			// A read of the partition's keys: a cluster that is down
			// refuses it (CLUSTERDOWN), though its nodes still answer
			// FUNCTION and SCRIPT. Within the probe's time: a Redis that
			// hangs makes it not ready then, not after the call timeout.
			if _, err := redis.DoContext(c, ctx, "EXISTS", p.key()); err != nil {
				return err
			}
			return q.ensureScriptsOn(c)
		})
	})
}

// MaxUpcomingSlots bounds the slots of one Upcoming call.
const MaxUpcomingSlots = 1440

// Upcoming counts the jobs due in each of n slots of step from now (Redis'
// clock): delayed jobs by due time and reserved jobs by the end of their
// lease. It costs, per partition, a read of the timers due within the
// window and a ZLEXCOUNT per such timer and slot, pipelined: it reads no
// job. It returns the start of the first slot.
func (q *Queue) Upcoming(ctx context.Context, step time.Duration, n int) (time.Time, []int64, error) {
	if n < 1 || n > MaxUpcomingSlots || step < time.Second {
		return time.Time{}, nil, fmt.Errorf("upcoming: %w: 1 to %d slots of at least 1s are needed", ErrInvalidJob, MaxUpcomingSlots)
	}
	if err := q.layoutStale(); err != nil {
		return time.Time{}, nil, fmt.Errorf("upcoming: %w", err)
	}
	var start int64
	err := q.withConn(ctx, q.partitions[0].key(), func(c redis.Conn) error {
		t, err := redis.Int64s(c.Do("TIME"))
		if err != nil {
			return err
		}
		start = t[0]*1000 + t[1]/1000
		return nil
	})
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("upcoming: %w", err)
	}
	stepMs := step.Milliseconds()
	perPartition := make([][]int64, len(q.partitions))
	err = q.eachPartition(ctx, func(p *partition) error {
		counts := make([]int64, n)
		perPartition[p.number-1] = counts
		return q.withConn(ctx, p.key(), func(c redis.Conn) error {
			// A timer is "delay,<topic>" or "reserved,<topic>".
			timers, err := redis.Strings(c.Do("ZRANGEBYSCORE", p.keyAt(keyTimers), "-inf", start+int64(n)*stepMs))
			if err != nil {
				return err
			}
			spans := make([]upcomingSpan, 0, len(timers))
			for _, timer := range timers {
				state, topic, _ := strings.Cut(timer, ",")
				index := p.keyAt(keyDelayed)
				if state == StateReserved {
					index = p.keyAt(keyReserved)
				}
				spans = append(spans, upcomingSpan{index: index, topic: topic, lo: 0, hi: n})
			}
			return countUpcoming(c, spans, start, stepMs, counts)
		})
	})
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("upcoming: %w", err)
	}
	counts := make([]int64, n)
	for _, pc := range perPartition {
		for i, v := range pc {
			counts[i] += v
		}
	}
	return time.UnixMilli(start), counts, nil
}

// upcomingSpan is a topic's slots lo to hi (excluded) in one index.
type upcomingSpan struct {
	index, topic string
	lo, hi       int
}

// upcomingChunk is the most counts one round trip of countUpcoming asks:
// Redis holds the replies of a pipeline until they are read.
const upcomingChunk = 1024

// countUpcoming adds the jobs of spans to counts, slot by slot (a slot is
// stepMs from start). A span is counted whole first; one with jobs is
// halved, round after round, until its slots are single, or counted slot
// by slot once it has a job per slot or more. So a topic costs about two
// counts per job and halving (a few hundred for a day of minutes) when its
// jobs are few, and one count per slot when they are many, instead of one
// per slot always: thousands of topics with a job each stay cheap.
func countUpcoming(c redis.Conn, spans []upcomingSpan, start, stepMs int64, counts []int64) error {
	for len(spans) > 0 {
		var next []upcomingSpan
		for len(spans) > 0 {
			chunk := spans[:min(len(spans), upcomingChunk)]
			spans = spans[len(chunk):]
			for _, s := range chunk {
				lo, hi := start+int64(s.lo)*stepMs, start+int64(s.hi)*stepMs
				if err := c.Send("ZLEXCOUNT", s.index, topicBound(s.topic, lo, '['), topicBound(s.topic, hi, '(')); err != nil {
					return err
				}
			}
			if err := c.Flush(); err != nil {
				return err
			}
			for _, s := range chunk {
				v, err := redis.Int64(c.Receive())
				if err != nil {
					return err
				}
				switch slots := s.hi - s.lo; {
				case v == 0:
				case slots == 1:
					counts[s.lo] += v
				case v >= int64(slots):
					for i := s.lo; i < s.hi; i++ {
						next = append(next, upcomingSpan{index: s.index, topic: s.topic, lo: i, hi: i + 1})
					}
				default:
					mid := s.lo + slots/2
					next = append(next, upcomingSpan{index: s.index, topic: s.topic, lo: s.lo, hi: mid},
						upcomingSpan{index: s.index, topic: s.topic, lo: mid, hi: s.hi})
				}
			}
		}
		spans = next
	}
	return nil
}
