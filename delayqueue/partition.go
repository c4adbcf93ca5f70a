package delayqueue

import (
	"context"
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
	claims   *lanes[claimBatch, [][]*Delivery]
	finishes *lanes[[]any, []removal]
	deletes  *lanes[[]any, []removal]
}

// serverLanes is the lanes' slots that the partitions on one Redis server
// share (see lanes).
type serverLanes struct {
	pushes   *laneGroup[pushCall, pushReply]
	claims   *laneGroup[claimBatch, [][]*Delivery]
	finishes *laneGroup[[]any, []removal]
	deletes  *laneGroup[[]any, []removal]
}

func newServerLanes() *serverLanes {
	return &serverLanes{
		pushes:   newLaneGroup[pushCall, pushReply](),
		claims:   newLaneGroup[claimBatch, [][]*Delivery](),
		finishes: newLaneGroup[[]any, []removal](),
		deletes:  newLaneGroup[[]any, []removal](),
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
		func(ctx context.Context, calls []claimBatch) ([][][]*Delivery, error) {
			return q.execClaims(ctx, p, calls)
		})
	idCount := func(ids []any) int { return len(ids) }
	p.finishes = server.finishes.lanes(MaxIDsPerCall, idCount, q.execRemovals(p, q.scripts.finish))
	p.deletes = server.deletes.lanes(MaxIDsPerCall, idCount, q.execRemovals(p, q.scripts.remove))
	return p
}
