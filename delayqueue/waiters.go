package delayqueue

// waiters.go: held Pops. A held Pop is a waiter in this process's FIFO of
// each of its topics (waiterRegistry); the dispatch loops of every
// partition wait on that partition's wake-up lists for those topics, and
// claim for the first waiters when a token comes (dispatchLoop).

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/pause"
	"github.com/delay-queue/delay-queue/internal/redisconn"
)

// A waiter is one held Pop. It sits in the FIFO of each of its topics until
// a dispatch loop checks it out to claim a job on its behalf.
type waiter struct {
	topics []string
	count  int            // jobs wanted at most
	result chan popResult // buffered; the dispatch loop sends exactly once per checkout that ends the wait

	// Guarded by the registry's mutex.
	elems     map[string]*list.Element // its place in each topic's FIFO; nil once checked out, until queued again
	abandoned bool                     // its Pop stopped waiting after a checkout
}

type popResult struct {
	deliveries []*Delivery
	err        error
}

// waiterRegistry holds this process' held Pops, first come first served per
// topic, and tells the dispatch loops which topics to listen to: loop i of
// every partition listens to the topics that hash to i. It also counts the
// webhook dispatchers waiting for callback jobs, which loop 0 of every
// partition listens for.
type waiterRegistry struct {
	mu      sync.Mutex
	byTopic map[string]*list.List
	// claiming counts, per topic, the waiters checked out by a dispatch
	// loop: a topic stays listened to while it has any, so that a waiter
	// coming back from a fruitless claim changes no loop's topics (and
	// interrupts no BLPOP).
	claiming map[string]int
	// loopTopics[i] is the set of topics with waiters that loop i serves,
	// and loopVersions[i] counts its changes, so that a loop rebuilds its
	// BLPOP's keys only when they changed.
	loopTopics   []map[string]struct{}
	loopVersions []uint64
	// listeners[i] are signalled when loop i's topics change (for the loops
	// of every partition: a channel per partition, see listen).
	listeners [][]chan struct{}
	hooks     hookWaiters
	// servingLocks let one dispatch loop at a time serve a topic (striped
	// by the topic's hash).
	servingLocks [64]sync.Mutex
}

func newWaiterRegistry(loops int) *waiterRegistry {
	r := &waiterRegistry{byTopic: make(map[string]*list.List), claiming: make(map[string]int),
		listeners: make([][]chan struct{}, loops)}
	for i := 0; i < loops; i++ {
		r.loopTopics = append(r.loopTopics, make(map[string]struct{}))
	}
	r.loopVersions = make([]uint64, loops)
	for i := range r.loopVersions {
		r.loopVersions[i] = 1 // 0 is the version of a loop that has read none
	}
	r.hooks.changed = make(chan struct{})
	return r
}

// listen returns the channel that signals a change in loop i's topics, for
// one partition's loop.
func (r *waiterRegistry) listen(i int) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	ch := make(chan struct{}, 1)
	r.listeners[i] = append(r.listeners[i], ch)
	return ch
}

func (r *waiterRegistry) notifyLocked(i int) {
	for _, ch := range r.listeners[i] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func topicHash(topic string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(topic))
	return h.Sum32()
}

func (r *waiterRegistry) loopOf(topic string) int {
	return int(topicHash(topic) % uint32(len(r.loopTopics)))
}

// serving takes the lock of topic's serving and returns its unlock.
func (r *waiterRegistry) serving(topic string) func() {
	m := &r.servingLocks[topicHash(topic)%uint32(len(r.servingLocks))]
	m.Lock()
	return m.Unlock
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
// ahead of) the others, and returns the loop indexes that gained a topic.
func (r *waiterRegistry) add(w *waiter, front bool) []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addLocked(w, front)
}

func (r *waiterRegistry) addLocked(w *waiter, front bool) []int {
	var newLoops []int
	w.elems = make(map[string]*list.Element, len(w.topics))
	for _, t := range w.topics { // distinct (PopBatch)
		l := r.byTopic[t]
		if l == nil {
			l = list.New()
			r.byTopic[t] = l
			i := r.loopOf(t)
			r.loopTopics[i][t] = struct{}{}
			r.loopVersions[i]++
			if !slices.Contains(newLoops, i) {
				newLoops = append(newLoops, i)
			}
			r.notifyLocked(i)
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
		r.byTopic[t].Remove(e)
		r.dropIfUnusedLocked(t)
	}
	w.elems = nil
}

// dropIfUnusedLocked stops listening to topic when no waiter of it is
// queued or checked out. r.mu must be held.
func (r *waiterRegistry) dropIfUnusedLocked(topic string) {
	if l := r.byTopic[topic]; l != nil && l.Len() == 0 && r.claiming[topic] == 0 {
		delete(r.byTopic, topic)
		i := r.loopOf(topic)
		delete(r.loopTopics[i], topic)
		r.loopVersions[i]++
		// A map keeps the room of its largest size: once a burst of
		// held pops on many topics is over, that room goes too.
		if len(r.byTopic) == 0 {
			r.byTopic = map[string]*list.List{}
		}
		if len(r.loopTopics[i]) == 0 {
			r.loopTopics[i] = map[string]struct{}{}
		}
	}
}

// settleLocked ends w's checkout in the counts of its topics. r.mu must be
// held.
func (r *waiterRegistry) settleLocked(w *waiter) {
	for _, t := range w.topics {
		if r.claiming[t]--; r.claiming[t] <= 0 {
			delete(r.claiming, t)
			if len(r.claiming) == 0 {
				r.claiming = map[string]int{}
			}
		}
		r.dropIfUnusedLocked(t)
	}
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
		for _, t := range w.topics {
			r.claiming[t]++
		}
		r.unlinkLocked(w)
		ws = append(ws, w)
	}
}

// giveUp is called by a Pop that stops waiting. It returns true when w was
// still queued (and is now gone); false when a dispatch loop checked it
// out, in which case the loop sends on w.result, or already has: a Pop
// whose hold ends as the loop hands it jobs must read them, not leave
// them claimed for nobody until their ttr.
func (r *waiterRegistry) giveUp(w *waiter) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.elems == nil { // checked out, not queued again
		w.abandoned = true
		return false
	}
	r.unlinkLocked(w)
	return true
}

// checkin ends a checkout that claimed nothing: w queues again at the front,
// unless its Pop has stopped waiting, which is then told so. It returns the
// loops that gained a topic: none, as w's topics were kept while it was
// checked out.
func (r *waiterRegistry) checkin(w *waiter, err error) []int {
	r.mu.Lock()
	if w.abandoned {
		r.settleLocked(w)
		r.mu.Unlock()
		w.result <- popResult{err: err}
		return nil
	}
	newLoops := r.addLocked(w, true)
	r.settleLocked(w)
	r.mu.Unlock()
	return newLoops
}

// handOut ends a checkout that claimed jobs for w, and sends them.
func (r *waiterRegistry) handOut(w *waiter, ds []*Delivery) {
	r.mu.Lock()
	r.settleLocked(w)
	r.mu.Unlock()
	w.result <- popResult{deliveries: ds}
}

// version is loop i's topics' version now.
func (r *waiterRegistry) version(i int) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loopVersions[i]
}

// topicsOf lists the topics loop i must listen to, and the version of
// that list; given the version the caller has (0 for none), it returns nil
// and false when nothing changed since.
func (r *waiterRegistry) topicsOf(i int, have uint64) ([]string, uint64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.loopVersions[i]
	if v == have {
		return nil, v, false
	}
	topics := make([]string, 0, len(r.loopTopics[i]))
	for t := range r.loopTopics[i] {
		topics = append(topics, t)
	}
	return topics, v, true
}

// hookWaiters are the webhook dispatchers of this process waiting for
// callback jobs (see Queue.WaitCallbacks).
type hookWaiters struct {
	waiting int
	// changed is closed and replaced when a token comes: every waiter
	// wakes.
	changed chan struct{}
}

// waitHooks registers a webhook waiter and returns the channel closed when
// a callback token comes, and whether it is the first waiter (loop 0 of
// every partition must start listening).
func (r *waiterRegistry) waitHooks() (<-chan struct{}, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks.waiting++
	if r.hooks.waiting == 1 {
		r.notifyLocked(0)
	}
	return r.hooks.changed, r.hooks.waiting == 1
}

// doneWaitingHooks unregisters a webhook waiter.
func (r *waiterRegistry) doneWaitingHooks() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hooks.waiting--
}

// hooksWanted reports whether a webhook dispatcher waits.
func (r *waiterRegistry) hooksWanted() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hooks.waiting > 0
}

// hookToken wakes every waiting webhook dispatcher.
func (r *waiterRegistry) hookToken() {
	r.mu.Lock()
	defer r.mu.Unlock()
	close(r.hooks.changed)
	r.hooks.changed = make(chan struct{})
}

// dispatchLoop is one shared blocking loop of a partition. It waits with
// BLPOP on the partition's wake-up lists of the topics it serves that have
// held Pops in this process (a BLPOP waits on the keys of one slot, so a
// loop serves one partition), and for each token claims a job there for
// the first waiter of that topic. Loop 0 also listens for callback jobs
// while a webhook dispatcher of this process waits. A few loops per
// partition serve any number of waiters and topics, so held Pops cost no
// Redis connection each.
//
// Tokens only wake; the claim script decides. A token lost with a killed
// process delays a wake-up by at most one blocking timeout, after which the
// loop tries every topic it serves anyway.
type dispatchLoop struct {
	q       *Queue
	p       *partition
	index   int
	control string
	changed chan struct{}

	mu      sync.Mutex
	blocked bool
	// version and hooks are what the loop listens to: its topics' version
	// and whether it listens for callback tokens.
	version uint64
	hooks   bool
	// round counts the waits begun, and interrupted is the last one an
	// interrupt was sent for: one per wait (see interrupt).
	round, interrupted uint64

	// interrupts counts the interrupt calls since the one sending the
	// wake-up token began (see interrupt).
	interrupts atomic.Int32
}

func newDispatchLoop(q *Queue, p *partition, index int) *dispatchLoop {
	return &dispatchLoop{q: q, p: p, index: index, control: q.keys.control(p.tag, q.instance, index),
		changed: q.waiters.listen(index)}
}

func (l *dispatchLoop) setBlocked(b bool) {
	l.mu.Lock()
	l.blocked = b
	l.mu.Unlock()
}

func (l *dispatchLoop) isBlocked() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.blocked
}

// startListening marks the loop blocked and reads what it is to wait for:
// its topics when their version is not have, and whether it listens for
// callback tokens. Both under the loop's lock, so that behind sees either
// the state before (and interrupts the wait to come) or what it will wait
// for.
func (l *dispatchLoop) startListening(have uint64) (topics []string, version uint64, changed, hooks bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.blocked = true
	l.round++
	topics, version, changed = l.q.waiters.topicsOf(l.index, have)
	hooks = l.listensForHooks()
	l.version, l.hooks = version, hooks
	return topics, version, changed, hooks
}

// behind reports whether the loop waits (or is about to) for less than it
// should, topics it does not listen to yet or callback tokens, in a wait
// no interrupt was sent for yet.
func (l *dispatchLoop) behind() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.behindLocked()
}

func (l *dispatchLoop) behindLocked() bool {
	return l.blocked && l.interrupted != l.round &&
		(l.version != l.q.waiters.version(l.index) || l.hooks != l.listensForHooks())
}

// claimInterrupt reports whether the loop is behind, and if so marks its
// wait as interrupted: the caller sends the token.
func (l *dispatchLoop) claimInterrupt() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.behindLocked() {
		return false
	}
	l.interrupted = l.round
	return true
}

// controlTTL bounds the life of a control list: a process killed with a
// token in it leaves nothing for long.
const controlTTL = 60 * time.Second

// interrupt ends the loop's current BLPOP so it listens to its new topics
// (or for callback tokens), when it waits without them. One token is sent
// per wait, however many calls come before the loop wakes, and concurrent
// calls coalesce: one sends, and checks again when more calls came
// meanwhile (the loop may have read its topics before their change); the
// others return at once. A burst of held pops coming and going (each may
// change a loop's topics) then costs a loop a few Redis calls, not one
// each, which would queue for the pool's connections.
func (l *dispatchLoop) interrupt() {
	if l.interrupts.Add(1) != 1 {
		return // the call in progress checks again for this one
	}
	for {
		seen := l.interrupts.Load()
		// Else it listens already, or reads its topics before it blocks,
		// or has the token of this wait to read.
		if l.claimInterrupt() {
			l.sendInterrupt()
		}
		if l.interrupts.CompareAndSwap(seen, 0) {
			return
		}
	}
}

// sendInterrupt pushes a token on the loop's control list, which its BLPOP
// also waits on.
func (l *dispatchLoop) sendInterrupt() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.q.withConn(ctx, l.control, func(c redis.Conn) error {
		if err := c.Send("LPUSH", l.control, "1"); err != nil {
			return err
		}
		_, err := c.Do("PEXPIRE", l.control, controlTTL.Milliseconds())
		return err
	})
}

// listensForHooks reports whether the loop waits for callback tokens now.
func (l *dispatchLoop) listensForHooks() bool {
	return l.index == 0 && l.q.waiters.hooksWanted()
}

// slotMovingPause is how long a dispatch loop waits before it dials again
// after its BLPOP met a slot that moved or is moving.
const slotMovingPause = 50 * time.Millisecond

// slotMoving reports whether err is a cluster's answer that a slot has
// moved or is moving: MOVED, ASK or TRYAGAIN.
func slotMoving(err error) bool {
	switch redisconn.RedirectKind(err) {
	case redisconn.RedirectMoved, redisconn.RedirectAsk, redisconn.RedirectTryAgain:
		return true
	}
	return false
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
	block := dispatchBlock(l.q.opts)
	backoff := 100 * time.Millisecond
	hookKey := l.p.keyAt(keyHookWake)
	wakePrefix := l.q.keys.wakePrefix(l.p.tag)
	// The BLPOP's keys are built again only when the loop's topics change:
	// a loop of a cluster's partition may serve a thousand topics.
	var (
		topics   []string
		version  uint64
		wakeKeys []any
		keyOf    map[string]string
		args     []any
	)
	for ctx.Err() == nil {
		ts, v, changed, hooks := l.startListening(version)
		if changed {
			topics, version = ts, v
			wakeKeys, keyOf = l.wakeKeysOf(topics, keyOf)
		}
		if len(topics) == 0 && !hooks {
			// Idle: the keys of the last topics, and the room of the
			// most ever listened to, go.
			wakeKeys, keyOf, args = nil, nil, nil
			l.setBlocked(false)
			health.idle()
			select {
			case <-l.changed:
			case <-ctx.Done():
			}
			health.ok()
			continue
		}
		if conn == nil {
			c, err := l.q.rdb.Dial(ctx, l.control)
			if err != nil {
				l.setBlocked(false)
				l.q.noteRedis(l.control, err)
				health.failed("BLPOP", fmt.Errorf("%w: %w", ErrUnavailable, err))
				_ = pause.For(ctx, backoff)
				backoff = min(backoff*2, block)
				continue
			}
			conn = c
		}
		if need := len(wakeKeys) + 3; cap(args) > 2*need+16 {
			args = make([]any, 0, need) // the room, and keys, of a burst gone by
		}
		args = append(args[:0], wakeKeys...)
		if hooks {
			args = append(args, hookKey)
		}
		args = append(args, l.control, int(block/time.Second))
		blpopStarted := time.Now()
		reply, err := redis.Strings(redis.DoWithTimeout(conn, block+5*time.Second, "BLPOP", args...))
		l.setBlocked(false)
		switch {
		case err == redis.ErrNil:
			// Timed out: the safety net. Serve every topic that has ready
			// jobs here, in case a token was lost with a killed process or
			// a dropped connection.
			// A webhook dispatcher claims after its own timeout: no token
			// for it here. The timeout itself is a completed round, not a
			// failure, also for a loop that listens for callbacks only.
			err = nil
			l.q.noteRedis(l.control, nil)
			if len(topics) > 0 {
				var ready []string
				if ready, err = l.readyTopics(ctx, topics); err == nil {
					err = l.serveEvery(ctx, ready, health)
				}
			}
		case slotMoving(err) || redisconn.IsUnblockedReply(err):
			// The slot moved (MOVED), or is moving: an ASK, or a TRYAGAIN
			// for the BLPOP's several keys, during a migration; or the
			// primary became a replica (UNBLOCKED, a failover asked for).
			// Redis answered: no outage and no failed round. The next Dial
			// finds the owner the map has learnt; a short pause first,
			// since a migrating slot answers at once until it has moved.
			conn.Close()
			conn = nil
			l.q.noteRedis(l.control, nil)
			_ = pause.For(ctx, slotMovingPause)
			continue
		case err != nil:
			conn.Close()
			conn = nil
			loopErr := unavailableUnlessAnswered(err)
			if errors.Is(loopErr, ErrUnavailable) {
				l.q.noteRedisSince(l.control, err, blpopStarted)
			} else {
				l.q.noteRedis(l.control, nil) // Redis answered, with an error
			}
			health.failed("BLPOP", loopErr)
			_ = pause.For(ctx, backoff)
			backoff = min(backoff*2, block)
			continue
		default:
			backoff = 100 * time.Millisecond
			l.q.noteRedis(l.control, nil)
			switch key := reply[0]; {
			case key == l.control:
			case key == hookKey:
				l.q.waiters.hookToken()
			default:
				_, err = l.serve(ctx, strings.TrimPrefix(key, wakePrefix))
			}
		}
		if err != nil {
			health.failed("claim.lua", err)
			continue
		}
		health.ok()
	}
}

// wakeKeysOf returns the wake-up lists of topics in this partition, as
// BLPOP arguments, taking the names known (by topic) from an earlier call,
// and the names by topic for the next one.
func (l *dispatchLoop) wakeKeysOf(topics []string, known map[string]string) ([]any, map[string]string) {
	keys := make([]any, len(topics))
	names := make(map[string]string, len(topics))
	for i, t := range topics {
		k, ok := known[t]
		if !ok {
			k = l.q.keys.wake(l.p.tag, t)
		}
		keys[i], names[t] = k, k
	}
	return keys, names
}

// dispatchBlock is how long one BLPOP of a dispatch loop blocks: the scan
// interval, in whole seconds, at least one.
func dispatchBlock(opts Options) time.Duration {
	return max(opts.ScanInterval.Truncate(time.Second), time.Second)
}

// readyTopics returns those of topics that have ready jobs in the
// partition: one cheap read per topic, pipelined, where a claim would cost
// a script call per topic.
func (l *dispatchLoop) readyTopics(ctx context.Context, topics []string) ([]string, error) {
	var ready []string
	err := l.q.withConn(ctx, l.p.key(), func(c redis.Conn) error {
		has, err := l.p.hasReady(c, topics)
		for i, t := range topics {
			if has[i] {
				ready = append(ready, t)
			}
		}
		return err
	})
	return ready, err
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

// serve claims jobs of the partition for the waiters of topic, first come
// first served. A token says a job is ready, not how many: serve claims
// for the first waiter, and while every waiter of a round got all it asked
// for (more may be ready, as in a burst), for twice as many waiters in the
// next round, all in one script call. It reports whether a job was handed
// out, and the error of a claim that failed.
//
// One loop at a time serves a topic, whatever its partition: a loop holds
// the waiters it checked out while it claims, and another partition's loop
// would otherwise serve the waiters behind them first.
func (l *dispatchLoop) serve(ctx context.Context, topic string) (bool, error) {
	unlock := l.q.waiters.serving(topic)
	defer unlock()
	served := false
	for round, jobs := 0, 1; round < serveRounds; round, jobs = round+1, min(2*jobs, maxClaimsPerCall) {
		ws := l.q.waiters.checkout(topic, jobs)
		if len(ws) == 0 {
			if !served {
				l.returnToken(topic)
			}
			return served, nil
		}
		all, some, err := l.claimFor(ws)
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
	_, _ = l.q.call(ctx, l.p, l.q.scripts.signal, []string{topic}, 1)
}

// claimFor runs one claim on the partition for checked-out waiters and
// hands each its jobs. Those left empty-handed queue again at the front,
// in their order. all reports whether every waiter got as many jobs as it
// asked for; some, whether any got one.
func (l *dispatchLoop) claimFor(ws []*waiter) (all, some bool, err error) {
	calls := make([]claimCall, len(ws))
	for i, w := range ws {
		calls[i] = claimCall{topics: w.topics, count: w.count}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	results, err := l.q.claimOn(ctx, l.p, calls)
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
		l.q.waiters.handOut(w, ds)
		some = true
	}
	return all, some, err
}
