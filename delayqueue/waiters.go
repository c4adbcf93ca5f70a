package delayqueue

import (
	"container/list"
	"hash/fnv"
	"sync"
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
// topic, and tells the dispatch loops which topics to listen to: loop i of
// every partition listens to the topics that hash to i. It also counts the
// webhook dispatchers waiting for callback jobs, which loop 0 of every
// partition listens for.
type waiterRegistry struct {
	mu      sync.Mutex
	byTopic map[string]*list.List
	// loopTopics[i] is the set of topics with waiters that loop i serves.
	loopTopics []map[string]struct{}
	// changed[i] is signalled when loop i's topics change (for the loops of
	// every partition: the channel is per partition, see listen).
	listeners [][]chan struct{}
	hooks     hookWaiters
	// servingLocks let one dispatch loop at a time serve a topic (striped
	// by the topic's hash).
	servingLocks [64]sync.Mutex
}

func newWaiterRegistry(loops int) *waiterRegistry {
	r := &waiterRegistry{byTopic: make(map[string]*list.List), listeners: make([][]chan struct{}, loops)}
	for i := 0; i < loops; i++ {
		r.loopTopics = append(r.loopTopics, make(map[string]struct{}))
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
	var newLoops []int
	w.elems = make(map[string]*list.Element, len(w.topics))
	for _, t := range w.topics {
		if _, twice := w.elems[t]; twice {
			continue // a topic listed twice waits once
		}
		l := r.byTopic[t]
		if l == nil {
			l = list.New()
			r.byTopic[t] = l
			i := r.loopOf(t)
			r.loopTopics[i][t] = struct{}{}
			newLoops = append(newLoops, i)
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
