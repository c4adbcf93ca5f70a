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

// MaxPopCount bounds the jobs one PopBatch claims.
const MaxPopCount = 100

// Pop hands out the first ready job of topics (the first topic in the list
// wins), leased for its ttr, waiting up to hold for one. It returns nil
// when the hold ends empty, when ctx ends, or when the queue stops waiting.
func (q *Queue) Pop(ctx context.Context, topics []string, hold time.Duration) (*Delivery, error) {
	ds, err := q.PopBatch(ctx, topics, 1, hold)
	if len(ds) == 0 {
		return nil, err
	}
	return ds[0], err
}

// PopBatch is Pop for up to count jobs: it waits for at least one, then
// returns every job it could claim at once. Jobs claimed after ctx ended
// (the consumer left) are given back at once, not after their ttr.
//
// A topic's jobs spread over every partition. A Pop tries the partitions
// in turn, starting from a different one each time, so that each gives out
// its share; within a partition a topic's jobs come out in the order they
// became ready. A held Pop waits in this process's FIFO of waiters, and the
// dispatch loops of every partition claim for it when a job of its topics
// becomes ready there.
func (q *Queue) PopBatch(ctx context.Context, topics []string, count int, hold time.Duration) ([]*Delivery, error) {
	if len(topics) == 0 || len(topics) > MaxPopTopics {
		return nil, fmt.Errorf("pop: %w: between 1 and %d topics are needed", ErrInvalidJob, MaxPopTopics)
	}
	for _, t := range topics {
		if t == "" || len(t) > MaxTopicBytes {
			return nil, fmt.Errorf("pop: %w: topic must be 1 to %d bytes", ErrInvalidJob, MaxTopicBytes)
		}
	}
	topics = distinct(topics)
	if count < 1 || count > MaxPopCount {
		return nil, fmt.Errorf("pop: %w: count must be 1 to %d", ErrInvalidJob, MaxPopCount)
	}
	if err := q.started(ctx); err != nil {
		return nil, fmt.Errorf("pop: %w", err)
	}
	if hold > q.opts.BlockTimeout {
		hold = q.opts.BlockTimeout
	}
	var lastErr error
	if !q.waiters.anyWaiting(topics) {
		ds, err := q.claim(ctx, topics, count)
		if err != nil && !errors.Is(err, ErrUnavailable) {
			return nil, err
		}
		if len(ds) > 0 {
			return q.handOver(ctx, ds)
		}
		lastErr = err
	}
	select {
	case <-q.stopWaiting:
		return nil, nil
	default:
	}
	if hold <= 0 {
		if lastErr == nil && q.outages.any() {
			// Not asked (held pops of these topics go first), and Redis is
			// not answering: "no job" could not be told from it.
			lastErr = fmt.Errorf("pop: %w: redis is not answering", ErrUnavailable)
		}
		return nil, lastErr
	}

	if q.held.Add(1) > int64(q.opts.MaxHeldPops) {
		q.held.Add(-1)
		return nil, fmt.Errorf("pop: %w: this server already holds %d pops", ErrTooManyWaiters, q.opts.MaxHeldPops)
	}
	defer q.held.Add(-1)
	w := &waiter{topics: topics, count: count, result: make(chan popResult, 1)}
	q.wakeLoops(q.waiters.add(w, false))
	timer := time.NewTimer(hold)
	defer timer.Stop()
	var res popResult
	select {
	case res = <-w.result:
	case <-timer.C:
	case <-ctx.Done():
	case <-q.stopWaiting:
	}
	if len(res.deliveries) == 0 && res.err == nil {
		if q.waiters.giveUp(w) {
			if q.outages.any() {
				return nil, fmt.Errorf("pop: %w: redis did not answer during the hold", ErrUnavailable)
			}
			return nil, nil
		}
		res = <-w.result
	}
	if res.err != nil {
		return nil, res.err
	}
	return q.handOver(ctx, res.deliveries)
}

// handOver returns the deliveries claimed for a pop, unless its consumer
// left meanwhile (ctx ended): then it gives them back at once, rather than
// after their ttr, and returns ctx's error.
func (q *Queue) handOver(ctx context.Context, ds []*Delivery) ([]*Delivery, error) {
	if len(ds) == 0 || ctx.Err() == nil {
		return ds, nil
	}
	for _, d := range ds {
		q.unclaim(d)
	}
	return nil, ctx.Err()
}

// distinct is topics without repeats, in their first order.
func distinct(topics []string) []string {
	for i, t := range topics {
		if slices.Contains(topics[:i], t) {
			out := slices.Clone(topics[:i])
			for _, u := range topics[i+1:] {
				if !slices.Contains(out, u) {
					out = append(out, u)
				}
			}
			return out
		}
	}
	return topics
}

// claimCall is one pop request's claim: up to count jobs of topics.
type claimCall struct {
	topics []string
	count  int
}

// claimBatch is what one caller asks of one partition's claim.lua call:
// the claims of a Pop, or of a dispatch loop for several waiters, served
// in order; or the ids of a finish (finishOn), finished before any claim
// of the call.
type claimBatch struct {
	calls  []claimCall
	finish []any
}

// claimOutcome is what a claimBatch got: per call its deliveries, and
// per id of finish its removal.
type claimOutcome struct {
	deliveries [][]*Delivery
	removals   []removal
}

func (b claimBatch) size() int {
	n := len(b.finish)
	for _, c := range b.calls {
		n += c.count
	}
	return n
}

// claimStint is how many claims the cursor's partition serves before the
// cursor moves on (see claim).
const claimStint = 16

// claim claims up to count jobs of topics for one Pop. Concurrent Pops
// start at one cursor partition, so that they share its script calls, as
// on one Redis; the cursor moves on when that partition runs short, or
// after claimStint claims, so that every partition gives out its share.
// When the cursor's partition has not enough, the others are read for the
// topics they have ready (one cheap read per partition and topic), and
// only those with some are asked, in the order of the best topic each has:
// a Pop that finds nothing costs one script call, not one per partition.
// With several topics the reading comes first, so that the first topic
// listed wins, as in the original; a claim of several jobs then takes the
// topics one at a time, each from every partition that has it ready, so
// that no job of a later topic is taken while one of an earlier topic is
// ready elsewhere.
//
// A partition whose Redis did not answer is left out for a while (see
// partition.isDown); its error is returned when no job was claimed.
func (q *Queue) claim(ctx context.Context, topics []string, count int) ([]*Delivery, error) {
	n := uint32(len(q.partitions))
	start := q.claimCursor.Load() % n
	if q.claimStint.Add(1) >= claimStint {
		q.claimStint.Store(0)
		q.claimCursor.CompareAndSwap(start, (start+1)%n)
	}
	var (
		got     []*Delivery
		lastErr error
		asked   = make([]bool, n)
	)
	ask := func(order []uint32, topics []string) {
		for _, at := range order {
			if len(got) >= count || ctx.Err() != nil {
				return
			}
			asked[at] = true
			want := count - len(got)
			ds, err := q.claimOn(ctx, q.partitions[at], []claimCall{{topics: topics, count: want}})
			if err != nil {
				lastErr = err
				continue
			}
			if len(ds[0]) < want {
				q.claimCursor.CompareAndSwap(at, (at+1)%n)
			}
			got = append(got, ds[0]...)
		}
	}
	if len(topics) == 1 || n == 1 {
		if p := q.partitions[start]; !p.isDown() {
			ask([]uint32{start}, topics)
		}
	}
	if len(got) < count && n > 1 && ctx.Err() == nil {
		var rest []uint32
		for i := uint32(0); i < n; i++ {
			if at := (start + i) % n; !asked[at] && !q.partitions[at].isDown() {
				rest = append(rest, at)
			}
		}
		order, has, err := q.byBestTopic(ctx, rest, topics)
		if err != nil {
			lastErr = err
		}
		if len(topics) == 1 || count-len(got) == 1 {
			ask(order, topics)
		} else {
			for i, topic := range topics {
				var holders []uint32
				for _, at := range order {
					if has[at][i] {
						holders = append(holders, at)
					}
				}
				ask(holders, []string{topic})
			}
		}
	}
	if len(got) > 0 {
		return got, nil
	}
	if lastErr == nil && q.allDown() {
		lastErr = fmt.Errorf("pop: %w: no partition's redis answered lately", ErrUnavailable)
	}
	return nil, lastErr
}

// byBestTopic orders the partitions of order (kept for ties) by the first
// of topics each has ready, leaving out those with none, and those whose
// read failed (the first failure is returned with the others' order).
// has gives, for each partition returned, which of topics it has ready.
// Partitions on one server are read in one pipeline, on one connection
// (one Redis holds them all; a cluster primary holds several), and the
// servers at once: an empty Pop costs a connection and a goroutine per
// server, not per partition.
func (q *Queue) byBestTopic(ctx context.Context, order []uint32, topics []string) (_ []uint32, has map[uint32][]bool, _ error) {
	ready := make([][]bool, len(order))
	best := make([]int, len(order))
	errs := make([]error, len(order))
	var servers []string
	groups := map[string][]int{} // server -> indexes in order
	for i, at := range order {
		addr := serverOf(q.rdb, q.partitions[at].key())
		if _, ok := groups[addr]; !ok {
			servers = append(servers, addr)
		}
		groups[addr] = append(groups[addr], i)
	}
	read := func(group []int) {
		parts := make([]*partition, len(group))
		for k, i := range group {
			parts[k] = q.partitions[order[i]]
		}
		has, perr := q.readyTopics(ctx, parts, topics)
		for k, i := range group {
			ready[i], best[i], errs[i] = has[k], slices.Index(has[k], true), perr[k]
		}
	}
	if len(servers) == 1 {
		read(groups[servers[0]])
	} else {
		var wg sync.WaitGroup
		for _, addr := range servers {
			wg.Go(func() { read(groups[addr]) })
		}
		wg.Wait()
	}
	var firstErr error
	ranked := make([]int, 0, len(order))
	for i := range order {
		if errs[i] != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("pop: %w", errs[i])
			}
			continue
		}
		if best[i] >= 0 {
			ranked = append(ranked, i)
		}
	}
	slices.SortStableFunc(ranked, func(a, b int) int { return best[a] - best[b] })
	out := make([]uint32, len(ranked))
	has = make(map[uint32][]bool, len(ranked))
	for k, i := range ranked {
		out[k] = order[i]
		has[order[i]] = ready[i]
	}
	return out, has, firstErr
}

// readyTopics gives, for each of parts (partitions on one server), which
// of topics have ready jobs there, and the error of its read: all their
// reads go in one pipeline, on a connection
// to the first one's server. A partition whose reply is an error (its slot
// moved since the map was read) has that error; one whose Redis did not
// answer is marked down.
func (q *Queue) readyTopics(ctx context.Context, parts []*partition, topics []string) ([][]bool, []error) {
	ready := make([][]bool, len(parts))
	errs := make([]error, len(parts))
	for k := range ready {
		ready[k] = make([]bool, len(topics))
	}
	err := q.withConn(ctx, parts[0].key(), func(c redis.Conn) error {
		for _, p := range parts {
			if err := p.sendHasReady(c, topics); err != nil {
				return err
			}
		}
		if err := c.Flush(); err != nil {
			return err
		}
		for k, p := range parts {
			has, err := p.receiveHasReady(c, topics)
			var reply redis.Error
			switch {
			case errors.As(err, &reply):
				errs[k] = unavailableUnlessAnswered(err)
			case err != nil:
				return err // the connection failed: every partition's read did
			default:
				ready[k] = has
			}
		}
		return nil
	})
	for k, p := range parts {
		if err != nil {
			errs[k] = err
		}
		p.noteError(errs[k])
	}
	return ready, errs
}

// hasReady says, per topic, whether the partition has ready jobs of it:
// one ZRANGEBYLEX per topic, pipelined on c, where a claim would cost a
// script call per topic.
func (p *partition) hasReady(c redis.Conn, topics []string) ([]bool, error) {
	if err := p.sendHasReady(c, topics); err != nil {
		return make([]bool, len(topics)), err
	}
	if err := c.Flush(); err != nil {
		return make([]bool, len(topics)), err
	}
	return p.receiveHasReady(c, topics)
}

// sendHasReady sends hasReady's reads, and receiveHasReady reads their
// replies, all of them even when one is an error (whose error it returns).
func (p *partition) sendHasReady(c redis.Conn, topics []string) error {
	for _, t := range topics {
		lo, hi := topicRange(t)
		if err := c.Send("ZRANGEBYLEX", p.keyAt(keyReady), lo, hi, "LIMIT", 0, 1); err != nil {
			return err
		}
	}
	return nil
}

func (p *partition) receiveHasReady(c redis.Conn, topics []string) ([]bool, error) {
	has := make([]bool, len(topics))
	var firstErr error
	for i := range topics {
		members, err := redis.Strings(c.Receive())
		var reply redis.Error
		if err != nil && !errors.As(err, &reply) {
			return has, err // the connection failed: nothing more to read
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		has[i] = len(members) > 0
	}
	return has, firstErr
}

// claimOn claims on partition p for calls, in one script call shared with
// the claims of other concurrent callers. This is the one way jobs are
// claimed for consumers.
func (q *Queue) claimOn(ctx context.Context, p *partition, calls []claimCall) ([][]*Delivery, error) {
	res, err := p.claims.do(ctx, claimBatch{calls: calls})
	if err != nil {
		p.noteError(err)
		return nil, fmt.Errorf("claim: %w", err)
	}
	out := res.deliveries
	for _, ds := range out {
		for _, d := range ds {
			q.obs.JobDelivered(d.Topic, d.Attempts)
		}
	}
	return out, nil
}

// execClaims runs several callers' claims on partition p in one claim.lua
// call, and first the finishes they carry (see finishOn).
func (q *Queue) execClaims(ctx context.Context, p *partition, batches []claimBatch) ([]claimOutcome, error) {
	requests, finishing := 0, 0
	for _, b := range batches {
		requests += len(b.calls)
		finishing += len(b.finish)
	}
	var topics []string
	seen := make(map[string]bool, 4)
	args := make([]any, 0, 2+finishing+3*requests)
	args = append(args, finishing)
	for _, b := range batches {
		args = append(args, b.finish...)
	}
	args = append(args, requests)
	for _, b := range batches {
		for _, c := range b.calls {
			args = append(args, c.count, len(c.topics))
			for _, t := range c.topics {
				args = append(args, t)
				if !seen[t] {
					seen[t] = true
					topics = append(topics, t)
				}
			}
		}
	}
	reply, err := redis.Values(q.call(ctx, p, q.scripts.claim, topics, args...))
	if err != nil {
		return nil, err
	}
	out := make([]claimOutcome, len(batches))
	if len(reply) < 2+2*finishing {
		return nil, fmt.Errorf("claim reply: %d values for %d ids to finish", len(reply), finishing)
	}
	if f, ok := reply[1].(int64); !ok || f != int64(finishing) {
		return nil, fmt.Errorf("claim reply: %v finished, for %d ids to finish", reply[1], finishing)
	}
	// One array for every removal of the call.
	removals, err := parseRemovals(reply[2:], finishing)
	if err != nil {
		return nil, fmt.Errorf("claim reply: %w", err)
	}
	for i, b := range batches {
		if len(b.finish) > 0 {
			out[i].removals = removals[:len(b.finish):len(b.finish)]
			removals = removals[len(b.finish):]
		}
	}
	rest := reply[2+2*finishing:]
	for i, b := range batches {
		out[i].deliveries = make([][]*Delivery, len(b.calls))
		for j := range b.calls {
			if len(rest) < 1 {
				return nil, fmt.Errorf("claim reply: cut short")
			}
			claimed, ok := rest[0].(int64)
			if !ok {
				return nil, fmt.Errorf("claim reply: count is %T", rest[0])
			}
			rest = rest[1:]
			if int64(len(rest)) < 5*claimed {
				return nil, fmt.Errorf("claim reply: cut short")
			}
			if claimed > 0 {
				// One allocation for the request's deliveries.
				ds := make([]Delivery, claimed)
				out[i].deliveries[j] = make([]*Delivery, claimed)
				for k := range ds {
					if err := parseClaimed(rest[:5], &ds[k]); err != nil {
						return nil, fmt.Errorf("claim reply: %w", err)
					}
					out[i].deliveries[j][k] = &ds[k]
					rest = rest[5:]
				}
			}
		}
	}
	return out, nil
}

// parseClaimed reads one claimed job's five reply values (id, topic, ttr,
// attempts, body) into d. It reads them directly rather than through
// redis.Scan, whose pointers and conversions cost six allocations per job.
func parseClaimed(v []any, d *Delivery) error {
	id, ok1 := v[0].([]byte)
	topic, ok2 := v[1].([]byte)
	ttr, ok3 := v[2].(int64)
	attempts, ok4 := v[3].(int64)
	body, ok5 := v[4].([]byte)
	if !ok1 || !ok2 || !ok3 || !ok4 || !ok5 {
		return fmt.Errorf("claimed job: unexpected value types %T %T %T %T %T", v[0], v[1], v[2], v[3], v[4])
	}
	*d = Delivery{ID: string(id), Topic: string(topic), Body: string(body), TTR: time.Duration(ttr) * time.Second, Attempts: int(attempts)}
	return nil
}

// unclaim gives back a delivery no consumer received. Failing that, the job
// comes back when its lease ends.
func (q *Queue) unclaim(d *Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := q.call(ctx, q.partitionOf(d.ID), q.scripts.unclaim, []string{d.Topic}, d.ID, d.Attempts)
	if err != nil {
		q.log.Warn("could not give back an undelivered job; it is delivered again after its ttr",
			"job_id", d.ID, "topic", d.Topic, "err", err)
	}
}

// wakeLoops interrupts the blocking wait of every partition's loops with
// the indexes given, so they start listening to their new topics at once.
func (q *Queue) wakeLoops(loops []int) {
	for _, i := range loops {
		for _, p := range q.partitions {
			l := p.loops[i]
			if l.behind() {
				go l.interrupt()
			}
		}
	}
}
