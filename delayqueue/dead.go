package delayqueue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// MaxDeadPage bounds one page of DeadList and one kick by count.
const MaxDeadPage = 1000

// deadSweepInterval is how often the dead letters' time to live is enforced
// for every topic (it is also enforced whenever a job dies).
const deadSweepInterval = time.Minute

// deadEntry is one dead letter as its partition's index lists it.
type deadEntry struct {
	p    *partition
	id   string
	died string // 13 digits: entries compare as text
}

// deadEntries reads up to n of a topic's dead letters from every
// partition's index, the newest (or, with oldest, the oldest) first, and
// merges them in that order. It also returns how many there are in all.
func (q *Queue) deadEntries(ctx context.Context, topic string, n int, oldest bool) ([]deadEntry, int, error) {
	lists := make([][]deadEntry, len(q.partitions))
	totals := make([]int, len(q.partitions))
	err := q.eachPartition(ctx, func(p *partition) error {
		return q.withConn(ctx, p.key(), func(c redis.Conn) error {
			min, max := topicRange(topic)
			if oldest {
				_ = c.Send("ZRANGEBYLEX", p.keyAt(keyDead), min, max, "LIMIT", 0, n)
			} else {
				_ = c.Send("ZREVRANGEBYLEX", p.keyAt(keyDead), max, min, "LIMIT", 0, n)
			}
			_ = c.Send("HGET", p.keyAt(keyCounts), StateDead+","+topic)
			if err := c.Flush(); err != nil {
				return err
			}
			members, err := redis.Strings(c.Receive())
			if err != nil {
				return err
			}
			total, err := redis.Int(c.Receive())
			if err != nil && err != redis.ErrNil {
				return err
			}
			totals[p.number-1] = total
			for _, m := range members {
				rest := strings.TrimPrefix(m, topic+",")
				died, id, ok := strings.Cut(rest, ",")
				if ok {
					lists[p.number-1] = append(lists[p.number-1], deadEntry{p: p, id: id, died: died})
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	var all []deadEntry
	total := 0
	for i := range lists {
		all = append(all, lists[i]...)
		total += totals[i]
	}
	sort.SliceStable(all, func(i, j int) bool {
		if all[i].died != all[j].died {
			return (all[i].died < all[j].died) == oldest
		}
		return (all[i].id < all[j].id) == oldest
	})
	return all, total, nil
}

// byPartition groups entries by partition, keeping their order.
func byPartition(entries []deadEntry) (map[*partition][]string, []*partition) {
	ids := make(map[*partition][]string)
	var order []*partition
	for _, e := range entries {
		if _, ok := ids[e.p]; !ok {
			order = append(order, e.p)
		}
		ids[e.p] = append(ids[e.p], e.id)
	}
	return ids, order
}

// DeadList returns a topic's dead letters, newest first, and how many there
// are in all. The page merges every partition's newest offset+limit.
func (q *Queue) DeadList(ctx context.Context, topic string, offset, limit int) ([]JobInfo, int, error) {
	if offset < 0 || limit < 1 || limit > MaxDeadPage {
		return nil, 0, fmt.Errorf("dead list: %w: offset must be 0 or more and limit 1 to %d", ErrInvalidJob, MaxDeadPage)
	}
	if err := q.started(ctx); err != nil {
		return nil, 0, fmt.Errorf("dead list %s: %w", topic, err)
	}
	entries, total, err := q.deadEntries(ctx, topic, offset+limit, false)
	if err != nil {
		return nil, 0, fmt.Errorf("dead list %s: %w", topic, err)
	}
	if offset >= len(entries) {
		return nil, total, nil
	}
	page := entries[offset:min(offset+limit, len(entries))]
	ids, order := byPartition(page)
	infos := make(map[string]*JobInfo, len(page))
	for _, p := range order {
		got, err := q.getJobs(ctx, p, ids[p])
		if err != nil {
			return nil, 0, fmt.Errorf("dead list %s: %w", topic, err)
		}
		for i, info := range got {
			if info != nil {
				infos[ids[p][i]] = info
			}
		}
	}
	jobs := make([]JobInfo, 0, len(page))
	for _, e := range page {
		if info := infos[e.id]; info != nil {
			jobs = append(jobs, *info)
		}
	}
	return jobs, total, nil
}

// DeadKick sends a topic's dead letters back to ready with their attempts
// reset: the job id, or (id "") the count oldest. It returns the ids kicked.
func (q *Queue) DeadKick(ctx context.Context, topic, id string, count int) ([]string, error) {
	if id == "" && (count < 1 || count > MaxDeadPage) {
		return nil, fmt.Errorf("dead kick: %w: count must be 1 to %d", ErrInvalidJob, MaxDeadPage)
	}
	if err := q.started(ctx); err != nil {
		return nil, fmt.Errorf("dead kick %s: %w", topic, err)
	}
	if id != "" {
		p := q.partitionOf(id)
		kicked, err := q.kickOn(ctx, p, topic, []string{id})
		if err != nil {
			return kicked, fmt.Errorf("dead kick %s: %w", topic, err)
		}
		return kicked, nil
	}
	// The oldest, read then kicked. A concurrent kick may take some of
	// them first (kick.lua skips a job no longer dead): then the next round
	// reads a wider window of the oldest and tries a random count of them,
	// so that concurrent kicks stop racing for the same few, until count
	// are kicked or none is left.
	var kicked []string
	for round := 0; round < maxKickRounds && len(kicked) < count; round++ {
		want := count - len(kicked)
		window := want
		if round > 0 {
			window = max(want, min(want*(round+1), MaxDeadPage))
		}
		entries, _, err := q.deadEntries(ctx, topic, window, true)
		if err != nil {
			return kicked, fmt.Errorf("dead kick %s: %w", topic, err)
		}
		entries = entries[:min(window, len(entries))]
		if len(entries) == 0 {
			break
		}
		pick := entries
		if len(pick) > want {
			rand.Shuffle(len(pick), func(i, j int) { pick[i], pick[j] = pick[j], pick[i] })
			pick = pick[:want]
		}
		ids, order := byPartition(pick)
		got := 0
		for _, p := range order {
			ok, err := q.kickOn(ctx, p, topic, ids[p])
			kicked, got = append(kicked, ok...), got+len(ok)
			if err != nil {
				return kicked, fmt.Errorf("dead kick %s: %w", topic, err)
			}
		}
		if len(entries) < window && got == len(pick) {
			break // every dead letter left was read, and those tried taken
		}
	}
	return kicked, nil
}

// maxKickRounds bounds the rounds of a kick of the oldest dead letters
// that lost some of them to concurrent kicks.
const maxKickRounds = 32

// kickOn sends the dead letters ids of partition p back to ready and
// returns those kicked (a job no longer dead is skipped).
func (q *Queue) kickOn(ctx context.Context, p *partition, topic string, ids []string) ([]string, error) {
	args := make([]any, 0, len(ids)+1)
	args = append(args, topic)
	for _, id := range ids {
		args = append(args, id)
	}
	return redis.Strings(q.callAck(ctx, p, q.scripts.kick, []string{topic}, args...))
}

// DeadDelete deletes one dead letter of a topic, or (id "") all of them.
// It returns how many it deleted; the observer counts them as deleted jobs.
func (q *Queue) DeadDelete(ctx context.Context, topic, id string) (total int, err error) {
	if err := q.started(ctx); err != nil {
		return 0, fmt.Errorf("dead delete %s: %w", topic, err)
	}
	defer func() {
		if total > 0 {
			q.obs.JobsDeleted(topic, total)
		}
	}()
	if id != "" {
		n, err := redis.Int(q.callAck(ctx, q.partitionOf(id), q.scripts.deadDelete, nil, topic, MaxDeadPage, id))
		if err != nil {
			return 0, fmt.Errorf("dead delete %s: %w", topic, err)
		}
		return n, nil
	}
	for _, p := range q.partitions {
		for {
			n, err := redis.Int(q.callAck(ctx, p, q.scripts.deadDelete, nil, topic, MaxDeadPage))
			if err != nil {
				return total, fmt.Errorf("dead delete %s: %w", topic, err)
			}
			total += n
			if n == 0 {
				break
			}
		}
	}
	return total, nil
}

// sweepDeadLetters enforces the dead letters' time to live on every
// partition, now and then, so old dead letters go even when no new job
// dies (see sweepRound).
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
		if q.layoutStale() != nil {
			// The jobs moved to another layout (logged once, by
			// watchLayout): this server's partitions hold none.
			health.ok()
			continue
		}
		if script, err := q.sweepRound(ctx); err != nil {
			health.failed(script, err)
			continue
		}
		health.ok()
	}
}

// sweepRound trims every partition's dead letters, then writes the layout
// record back if Redis lost it (a restart without persistence, a FLUSHDB):
// the jobs stored since carry this server's partition count, and a server
// started with another bucket_size must be refused, not let misroute them.
// A record with another count is an error. On failure it names the script
// or command that failed first.
func (q *Queue) sweepRound(ctx context.Context) (string, error) {
	var failure error
	script := ""
	for _, p := range q.partitions {
		if s, err := q.sweepPartition(ctx, p); err != nil && failure == nil {
			failure, script = err, s
		}
	}
	if err := q.recordLayout(ctx); err != nil && failure == nil {
		failure, script = err, "HSETNX"
	}
	return script, failure
}

// sweepPartition trims the dead letters of every topic of p that has some.
// On failure it names the script or command that failed.
func (q *Queue) sweepPartition(ctx context.Context, p *partition) (string, error) {
	counts, err := q.partitionCounts(ctx, p)
	if err != nil {
		return "HGETALL", err
	}
	var topics []any
	for topic, s := range counts.topics {
		if s.Dead > 0 {
			topics = append(topics, topic)
		}
	}
	for start := 0; start < len(topics); start += 100 {
		if _, err := q.call(ctx, p, q.scripts.deadSweep, nil, topics[start:min(start+100, len(topics))]...); err != nil {
			return "deadsweep.lua", err
		}
	}
	return "", nil
}
