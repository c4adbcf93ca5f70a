package delayqueue

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// A waiter is one held Pop. It sits in the FIFO of each of its topics until
// a dispatch loop checks it out to claim a job on its behalf.
type waiter struct {
	topics []string
	count  int            // jobs wanted at most
	result chan popResult // buffered; the dispatch loop sends exactly once per checkout that ends the wait
	elems  map[string]*list.Element

	// Guarded by the registry's mutex.
	checkedOut bool // a dispatch loop is claiming for it
	abandoned  bool // its Pop stopped waiting while checked out
}

type popResult struct {
	deliveries []*Delivery
	err        error
}

// waiterRegistry holds this process' held Pops, first come first served per
// topic, and tells each dispatch loop which topics it must listen to.
type waiterRegistry struct {
	mu      sync.Mutex
	byTopic map[string]*list.List
	// loopTopics[i] is the set of topics with waiters that loop i serves.
	loopTopics []map[string]struct{}
	changed    []chan struct{}
}

func newWaiterRegistry(loops int) *waiterRegistry {
	r := &waiterRegistry{byTopic: make(map[string]*list.List)}
	for i := 0; i < loops; i++ {
		r.loopTopics = append(r.loopTopics, make(map[string]struct{}))
		r.changed = append(r.changed, make(chan struct{}, 1))
	}
	return r
}

func (r *waiterRegistry) loopOf(topic string) int {
	h := fnv.New32a()
	h.Write([]byte(topic))
	return int(h.Sum32() % uint32(len(r.loopTopics)))
}

// anyWaiting reports whether a waiter already queues for one of topics, in
// which case a new Pop must queue behind it.
func (r *waiterRegistry) anyWaiting(topics []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range topics {
		if l := r.byTopic[t]; l != nil && l.Len() > 0 {
			return true
		}
	}
	return false
}

// add queues w behind (or, for a waiter coming back from a fruitless claim,
// ahead of) the others, and returns the loops that gained a topic.
func (r *waiterRegistry) add(w *waiter, front bool) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	var newLoops []int
	w.elems = make(map[string]*list.Element, len(w.topics))
	for _, t := range w.topics {
		l := r.byTopic[t]
		if l == nil {
			l = list.New()
			r.byTopic[t] = l
			i := r.loopOf(t)
			r.loopTopics[i][t] = struct{}{}
			newLoops = append(newLoops, i)
			select {
			case r.changed[i] <- struct{}{}:
			default:
			}
		}
		if front {
			w.elems[t] = l.PushFront(w)
		} else {
			w.elems[t] = l.PushBack(w)
		}
	}
	return newLoops
}

// unlinkLocked removes w from every FIFO. r.mu must be held.
func (r *waiterRegistry) unlinkLocked(w *waiter) {
	for t, e := range w.elems {
		l := r.byTopic[t]
		l.Remove(e)
		if l.Len() == 0 {
			delete(r.byTopic, t)
			delete(r.loopTopics[r.loopOf(t)], t)
		}
	}
	w.elems = nil
}

// checkout takes the first waiters of topic for one claim, in order, as
// many as fit in maxJobs jobs wanted (at least one when any waits).
func (r *waiterRegistry) checkout(topic string, maxJobs int) []*waiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ws []*waiter
	jobs := 0
	for {
		l := r.byTopic[topic]
		if l == nil || l.Len() == 0 {
			return ws
		}
		w := l.Front().Value.(*waiter)
		if len(ws) > 0 && jobs+w.count > maxJobs {
			return ws
		}
		jobs += w.count
		r.unlinkLocked(w)
		w.checkedOut = true
		ws = append(ws, w)
	}
}

// giveUp is called by a Pop that stops waiting. It returns true when w was
// still queued (and is now gone); false when a dispatch loop has it checked
// out, in which case the loop will send on w.result.
func (r *waiterRegistry) giveUp(w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.checkedOut {
		w.abandoned = true
		return false
	}
	r.unlinkLocked(w)
	return true
}

// checkin ends a checkout that claimed nothing: w queues again at the front,
// unless its Pop has stopped waiting, which is then told so.
func (r *waiterRegistry) checkin(w *waiter, err error) []int {
	r.mu.Lock()
	w.checkedOut = false
	abandoned := w.abandoned
	r.mu.Unlock()
	if abandoned {
		w.result <- popResult{err: err}
		return nil
	}
	return r.add(w, true)
}

// topicsOf lists the topics loop i must listen to.
func (r *waiterRegistry) topicsOf(i int) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	topics := make([]string, 0, len(r.loopTopics[i]))
	for t := range r.loopTopics[i] {
		topics = append(topics, t)
	}
	return topics
}

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
// returns every job it could claim at once.
func (q *Queue) PopBatch(ctx context.Context, topics []string, count int, hold time.Duration) ([]*Delivery, error) {
	if len(topics) == 0 || len(topics) > MaxPopTopics {
		return nil, fmt.Errorf("pop: %w: between 1 and %d topics are needed", ErrInvalidJob, MaxPopTopics)
	}
	for _, t := range topics {
		if t == "" || len(t) > MaxTopicBytes {
			return nil, fmt.Errorf("pop: %w: topic must be 1 to %d bytes", ErrInvalidJob, MaxTopicBytes)
		}
	}
	if count < 1 || count > MaxPopCount {
		return nil, fmt.Errorf("pop: %w: count must be 1 to %d", ErrInvalidJob, MaxPopCount)
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
			return ds, nil
		}
		lastErr = err
	}
	select {
	case <-q.stopWaiting:
		return nil, nil
	default:
	}
	if hold <= 0 {
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
			if q.redisDown.Load() {
				return nil, fmt.Errorf("pop: %w: redis did not answer during the hold", ErrUnavailable)
			}
			return nil, nil
		}
		res = <-w.result
	}
	if len(res.deliveries) > 0 && ctx.Err() != nil {
		// The consumer is gone: give the jobs back now rather than after ttr.
		for _, d := range res.deliveries {
			q.unclaim(d)
		}
		return nil, ctx.Err()
	}
	return res.deliveries, res.err
}

// claimCall is one pop request's claim: up to count jobs of topics.
type claimCall struct {
	topics []string
	count  int
}

// claim claims up to count jobs of topics, in one script call shared with
// the claims of other concurrent pops.
func (q *Queue) claim(ctx context.Context, topics []string, count int) ([]*Delivery, error) {
	ds, err := q.claims.do(ctx, claimCall{topics: topics, count: count})
	if err != nil {
		return nil, fmt.Errorf("claim: %w", err)
	}
	q.noteDelivered(ds)
	return ds, nil
}

// noteDelivered reports claimed jobs to the observer.
func (q *Queue) noteDelivered(ds []*Delivery) {
	for _, d := range ds {
		q.obs.JobDelivered(d.Topic, d.Attempts)
	}
}

// execClaims runs several pops' claims in one claim.lua call.
func (q *Queue) execClaims(ctx context.Context, calls []claimCall) ([][]*Delivery, error) {
	args := make([]any, 0, 2+3*len(calls))
	args = append(args, len(calls), maxStaleSkips)
	for _, c := range calls {
		args = append(args, c.count, len(c.topics))
		for _, t := range c.topics {
			args = append(args, t)
		}
	}
	reply, err := redis.Values(q.eval(ctx, q.scripts.claim, nil, args...))
	if err != nil {
		return nil, err
	}
	out := make([][]*Delivery, len(calls))
	rest := reply[1:]
	for i := range calls {
		if len(rest) < 2 {
			return nil, fmt.Errorf("reply: cut short")
		}
		claimed, err := redis.Int(rest[1], nil)
		if err != nil {
			return nil, fmt.Errorf("reply: %w", err)
		}
		rest = rest[2:]
		if len(rest) < 5*claimed {
			return nil, fmt.Errorf("reply: cut short")
		}
		if claimed > 0 {
			// One allocation for the request's deliveries.
			ds := make([]Delivery, claimed)
			out[i] = make([]*Delivery, claimed)
			for j := range ds {
				if err := parseClaimed(rest[:5], &ds[j]); err != nil {
					return nil, fmt.Errorf("reply: %w", err)
				}
				out[i][j] = &ds[j]
				rest = rest[5:]
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
	_, err := q.eval(ctx, q.scripts.unclaim, nil, d.ID, d.Attempts)
	if err != nil {
		q.log.Warn("could not give back an undelivered job; it is delivered again after its ttr",
			"job_id", d.ID, "topic", d.Topic, "err", err)
	}
}

// wakeLoops interrupts the blocking wait of loops that gained topics, so
// they start listening to them at once.
func (q *Queue) wakeLoops(loops []int) {
	for _, i := range loops {
		q.loops[i].interrupt()
	}
}
