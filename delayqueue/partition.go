package delayqueue

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
)

// partition is one of the Queue's partitions: its hash tag and keys, the
// scanner that moves its due work, the loops that wait on its wake-up
// lists, and the lanes in which concurrent calls to it share script calls.
// Every script call goes to one partition, so to one Redis Cluster slot.
type partition struct {
	number int    // 1..BucketSize
	tag    string // "{...}", the start of every key of the partition
	// keys are the partition's keys in the scripts' KEYS order, boxed once.
	keys []any

	scanner *scanner
	loops   []*dispatchLoop

	q *Queue
	// downUntil (unix ns) is set when the partition's Redis did not
	// answer: Pops leave it out until then, rather than wait for it each
	// time (see claim).
	downUntil atomic.Int64

	pushes   *lanes[pushCall, pushReply]
	claims   *lanes[claimBatch, claimOutcome]
	finishes *lanes[[]any, []removal]
	deletes  *lanes[[]any, []removal]
}

// serverLanes is the lanes' slots that the partitions on one Redis server
// share (see lanes).
type serverLanes struct {
	pushes   *laneGroup[pushCall, pushReply]
	claims   *laneGroup[claimBatch, claimOutcome]
	finishes *laneGroup[[]any, []removal]
	deletes  *laneGroup[[]any, []removal]
}

// newServerLanes makes them with single slots for single-item calls of
// each kind (see singleSlotsFor).
func newServerLanes(single int) *serverLanes {
	return &serverLanes{
		pushes:   newLaneGroup[pushCall, pushReply](single),
		claims:   newLaneGroup[claimBatch, claimOutcome](single),
		finishes: newLaneGroup[[]any, []removal](single),
		deletes:  newLaneGroup[[]any, []removal](single),
	}
}

func newPartition(q *Queue, number int, tag string, loops int, server *serverLanes) *partition {
	p := &partition{q: q, number: number, tag: tag}
	for _, k := range q.keys.partitionKeys(p.tag) {
		p.keys = append(p.keys, k)
	}
	p.scanner = newScanner(q, p)
	for i := 0; i < loops; i++ {
		p.loops = append(p.loops, newDispatchLoop(q, p, i))
	}
	p.pushes = server.pushes.lanes(MaxPushBatchJobs, func(c pushCall) int { return len(c.jobs) },
		func(ctx context.Context, calls []pushCall) ([]pushReply, error) { return q.execPushes(ctx, p, calls) })
	p.claims = server.claims.lanes(maxClaimsPerCall, claimBatch.size,
		func(ctx context.Context, calls []claimBatch) ([]claimOutcome, error) {
			return q.execClaims(ctx, p, calls)
		})
	idCount := func(ids []any) int { return len(ids) }
	p.finishes = server.finishes.lanes(MaxIDsPerCall, idCount, q.execRemovals(p, q.scripts.finish))
	p.deletes = server.deletes.lanes(MaxIDsPerCall, idCount, q.execRemovals(p, q.scripts.remove))
	return p
}

// inPartitions runs call once for each partition holding some of n items
// (item i belongs to job idOf(i)), with the indexes of its items in input
// order: at once, one goroutine each, when they span several partitions.
// For each call that fails, fail gets its items and its error. It returns
// how many items failed, and the first error.
func (q *Queue) inPartitions(n int, idOf func(int) string, call func(p *partition, idx []int) error, fail func(idx []int, err error)) (int, error) {
	var (
		order []*partition
		items [][]int
	)
	for i := range n {
		p := q.partitionOf(idOf(i))
		k := slices.Index(order, p)
		if k < 0 {
			k = len(order)
			order = append(order, p)
			items = append(items, nil)
		}
		items[k] = append(items[k], i)
	}
	errs := make([]error, len(order))
	if len(order) == 1 {
		errs[0] = call(order[0], items[0])
	} else {
		var wg sync.WaitGroup
		for k, p := range order {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[k] = call(p, items[k])
			}()
		}
		wg.Wait()
	}
	failed := 0
	var firstErr error
	for k, err := range errs {
		if err == nil {
			continue
		}
		if firstErr == nil {
			firstErr = err
		}
		fail(items[k], err)
		failed += len(items[k])
	}
	return failed, firstErr
}
