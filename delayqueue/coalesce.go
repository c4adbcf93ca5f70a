package delayqueue

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// coalescer runs the calls of many concurrent callers as few script calls:
// a caller queues its call and, while fewer than its group's slots
// executions are in flight, becomes the leader that executes everything
// queued so far (up to maxSize items). Under load, calls that arrive while a script runs share
// the next one; alone, a call runs at once, with no added latency. A leader
// done with its script call hands its slot to the oldest queued call, whose
// caller leads next; only that caller wakes, not every waiting one.
//
// Batching changes no guarantee: each call's items still go through one
// atomic script, and several calls in one script behave as if run one after
// the other.
type coalescer[T any, R any] struct {
	maxSize int
	// yield, when set (runtime.Gosched), lets the goroutines ready to run
	// queue their calls before a leader takes its batch. Calls that
	// arrived together, as the requests of one network poll do, then
	// share one script call, where the first would otherwise go alone and
	// the rest wait for it. When nothing else is ready to run, the yield
	// returns at once.
	yield func()
	size  func(T) int
	// exec runs items in one script call and returns one result per item,
	// or an error that every item of the batch gets.
	exec func(ctx context.Context, items []T) ([]R, error)

	// group holds the slots, shared with the coalescers of the other
	// partitions on the same Redis server, and the lock of all of them.
	group   *slotGroup[T, R]
	member  int // its index in group.members
	pending []*coalescedCall[T, R]
}

// slotGroup is the script calls in flight that coalescers of one kind
// share: those of the partitions a Redis server holds. Calls then wait for
// the server, not for their partition: the fewer calls in flight there
// are, the more jobs each carries, and the fixed cost of a script call is
// most of a small one's. A slot freed goes to the next member with calls
// queued, in turn, so that every partition is served.
type slotGroup[T any, R any] struct {
	mu      sync.Mutex
	slots   int // script calls in flight at most
	leaders int // slots taken: by leaders, or handed to a queued call
	members []*coalescer[T, R]
}

func newSlotGroup[T any, R any](slots int) *slotGroup[T, R] {
	return &slotGroup[T, R]{slots: slots}
}

type coalescedCall[T any, R any] struct {
	item T
	res  R
	err  error
	done chan struct{}
	// lead holds a slot a leader handed to this call and its caller has
	// not taken yet (see handOffLocked). Only handOffLocked sends on it,
	// with the group's lock held, and only when it is empty.
	lead chan struct{}
}

// coalescedCallTimeout bounds one batched script call, waiting for a pooled
// connection included.
const coalescedCallTimeout = 30 * time.Second

// newCoalescer makes a coalescer with slots of its own.
func newCoalescer[T any, R any](slots, maxSize int, size func(T) int, exec func(context.Context, []T) ([]R, error)) *coalescer[T, R] {
	return newSlotGroup[T, R](slots).coalescer(maxSize, size, exec)
}

// coalescer makes a coalescer sharing the group's slots.
func (g *slotGroup[T, R]) coalescer(maxSize int, size func(T) int, exec func(context.Context, []T) ([]R, error)) *coalescer[T, R] {
	c := &coalescer[T, R]{maxSize: maxSize, size: size, exec: exec, group: g}
	g.mu.Lock()
	c.member = len(g.members)
	g.members = append(g.members, c)
	g.mu.Unlock()
	return c
}

// do runs item, alone or with others, and returns its result. ctx bounds
// the wait for a leader; once its script runs, do waits for the outcome.
func (c *coalescer[T, R]) do(ctx context.Context, item T) (R, error) {
	call := &coalescedCall[T, R]{item: item, done: make(chan struct{}), lead: make(chan struct{}, 1)}
	g := c.group
	g.mu.Lock()
	c.pending = append(c.pending, call)
	leading := g.leaders < g.slots
	if leading {
		g.leaders++
	}
	g.mu.Unlock()
	for {
		if leading {
			c.leadOnce(ctx)
			leading = false
		}
		select {
		case <-call.done:
			c.passOnHandedSlot(ctx, call)
			return call.res, call.err
		case <-call.lead:
			leading = true
		case <-ctx.Done():
			if c.withdraw(call) {
				var zero R
				return zero, ctx.Err()
			}
			<-call.done // already running: its outcome is what happened
			c.passOnHandedSlot(ctx, call)
			return call.res, call.err
		}
	}
}

// leadOnce runs one script call with the queued calls, as a leader holding
// a slot, then hands the slot on.
func (c *coalescer[T, R]) leadOnce(ctx context.Context) {
	if c.yield != nil {
		c.yield()
	}
	if batch := c.take(); len(batch) > 0 {
		c.run(ctx, batch)
	}
	c.group.mu.Lock()
	c.group.handOffLocked(c.member)
	c.group.mu.Unlock()
}

// handOffLocked passes the slot of a leader of member `from` to the oldest
// queued call, with none waiting for it, of the next member after it that
// has one (from itself last), or frees it when there is none. g.mu must be
// held. (A caller that took a slot from lead and leads with it may be
// handed a second: it leads again once done.)
func (g *slotGroup[T, R]) handOffLocked(from int) {
	for i := 1; i <= len(g.members); i++ {
		m := g.members[(from+i)%len(g.members)]
		for _, p := range m.pending {
			if len(p.lead) == 0 {
				p.lead <- struct{}{} // buffered, and only sent on here: never blocks
				return
			}
		}
	}
	g.leaders--
}

// passOnHandedSlot uses a slot handed to call after another leader ran it:
// its caller leads once more, for the calls queued since.
func (c *coalescer[T, R]) passOnHandedSlot(ctx context.Context, call *coalescedCall[T, R]) {
	select {
	case <-call.lead:
		c.leadOnce(ctx)
	default:
	}
}

// take removes up to maxSize items' worth of queued calls, oldest first.
func (c *coalescer[T, R]) take() []*coalescedCall[T, R] {
	c.group.mu.Lock()
	defer c.group.mu.Unlock()
	n, size := 0, 0
	for n < len(c.pending) {
		s := c.size(c.pending[n].item)
		if n > 0 && size+s > c.maxSize {
			break
		}
		size += s
		n++
	}
	batch := make([]*coalescedCall[T, R], n)
	copy(batch, c.pending[:n])
	c.pending = append(c.pending[:0], c.pending[n:]...)
	return batch
}

// withdraw removes a call that has not started; false when it has. A slot
// handed to the call passes on.
func (c *coalescer[T, R]) withdraw(call *coalescedCall[T, R]) bool {
	c.group.mu.Lock()
	defer c.group.mu.Unlock()
	for i, p := range c.pending {
		if p == call {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
			// Its caller is here, not leading: a slot waiting in lead
			// is not taken and passes on.
			if len(call.lead) == 1 {
				<-call.lead
				c.group.handOffLocked(c.member)
			}
			return true
		}
	}
	return false
}

func (c *coalescer[T, R]) run(ctx context.Context, batch []*coalescedCall[T, R]) {
	items := make([]T, len(batch))
	for i, b := range batch {
		items[i] = b.item
	}
	// The leader's ctx must not cancel the others' calls.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), coalescedCallTimeout)
	defer cancel()
	results, err := c.exec(ctx, items)
	for i, b := range batch {
		if err != nil {
			b.err = err
		} else {
			b.res = results[i]
		}
		close(b.done)
	}
}

// lanes splits calls by size between two coalescers, so that a batch
// never waits behind single calls nor singles behind a batch. Each lets
// a few script calls run at once (singleSlots, batchSlots), so that Redis
// runs one while the next is sent; calls arriving meanwhile share the next
// one. Calls of one item (a single push, pop, finish or delete) arrive
// many at a time, and their leader yields before taking its batch (see
// coalescer.yield).
// Measured with dq-bench: before the yield, one slot for single calls gave
// pop-finish 4% more than two; with it, two slots gave push and
// pop-finish about 4% more than one, and the yield itself about 10% to
// pop-finish. Two slots gave the batch figures 5% more than one. Since a
// call holds one partition's items, three single-call slots did better than
// two on the default 3 partitions (wrk push and pop-finish medians 6–20%
// higher in two sets of 8 and 10 rounds side by side, though not in every
// round; Redis' CPU per job the same), and one lost 12–18%. Once the
// scripts' calls cost less, a cluster primary holding 4 partitions did
// better with two (see singleSlotsFor).
//
// The partitions on one Redis server share their lanes' slots (laneGroup):
// the single-call script calls of a kind in flight are bounded per server,
// not per partition, so that the jobs of a server's partitions share calls
// as they would with one partition. (Per partition, 3 partitions cut the
// jobs per push call from 13 to 5 under dq-bench, and raised Redis' CPU
// per job 1.6 times.)
type lanes[T any, R any] struct {
	single, batch *coalescer[T, R]
	size          func(T) int
}

// laneGroup is the slots that the lanes of one kind share on one server.
type laneGroup[T any, R any] struct {
	single, batch *slotGroup[T, R]
}

// newLaneGroup makes the slots: single for calls of one item, batchSlots
// for larger ones.
func newLaneGroup[T any, R any](single int) *laneGroup[T, R] {
	return &laneGroup[T, R]{single: newSlotGroup[T, R](single), batch: newSlotGroup[T, R](batchSlots)}
}

// newLanes makes lanes with slots of their own (singleSlots and batchSlots).
func newLanes[T any, R any](maxSize int, size func(T) int, exec func(context.Context, []T) ([]R, error)) *lanes[T, R] {
	return newLaneGroup[T, R](singleSlots).lanes(maxSize, size, exec)
}

// lanes makes lanes sharing the group's slots.
func (g *laneGroup[T, R]) lanes(maxSize int, size func(T) int, exec func(context.Context, []T) ([]R, error)) *lanes[T, R] {
	single := g.single.coalescer(maxSize, size, exec)
	single.yield = runtime.Gosched
	return &lanes[T, R]{
		single: single,
		batch:  g.batch.coalescer(maxSize, size, exec),
		size:   size,
	}
}

func (l *lanes[T, R]) do(ctx context.Context, item T) (R, error) {
	if l.size(item) > 1 {
		return l.batch.do(ctx, item)
	}
	return l.single.do(ctx, item)
}
