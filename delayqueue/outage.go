package delayqueue

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delay-queue/delay-queue/internal/redisconn"
)

// outages tells when Redis stops answering and when it answers again, so
// that an outage is logged once when it starts and once when it ends, not
// once per call. On a cluster it follows each hash slot the engine's calls
// went to (a partition's keys share one): one primary may be down while
// the others answer, and the successes on those must not end the outage of
// the slots it held. A slot is down from a call to it that Redis did not
// answer until a call to it that Redis answered, or until no call to it
// has failed for staleAfter (a slot the engine stopped calling, or calls
// seldom). One Redis (or Sentinel's primary) counts as one slot: any
// answer ends its outage.
type outages struct {
	log        *slog.Logger
	cluster    bool
	now        func() time.Time
	staleAfter time.Duration

	down atomic.Int32 // slots down, so that a call sees "none" without the lock
	mu   sync.Mutex
	// lastFailure holds the slots down and the time of their last failure.
	lastFailure map[int]time.Time
	// recovered holds when each slot was last found up again: a failure
	// of a call begun before that (a call left waiting on a primary that
	// hung, as its replica took over) starts no new outage.
	recovered map[int]time.Time
}

// outageStaleAfter is how long a slot stays down with no call failing on
// it: several rounds of the scanners, which call every partition at least
// once a ScanInterval while Redis is unreachable, or once a call timeout
// (redisconn.DefaultCallTimeout) while it hangs.
const outageStaleAfter = 3 * redisconn.DefaultCallTimeout

func newOutages(logger *slog.Logger, cluster bool) *outages {
	return &outages{log: logger, cluster: cluster, now: time.Now, staleAfter: outageStaleAfter,
		lastFailure: map[int]time.Time{}, recovered: map[int]time.Time{}}
}

// slotOf is what a call on key counts for: its hash slot on a cluster,
// else the one Redis.
func (o *outages) slotOf(key string) int {
	if !o.cluster {
		return 0
	}
	return redisconn.Slot(key)
}

// answered notes a call on key that Redis answered, and logs the end of the
// outage when no slot is left down.
func (o *outages) answered(key string) {
	if o.down.Load() == 0 {
		return
	}
	slot := o.slotOf(key)
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, down := o.lastFailure[slot]; down {
		delete(o.lastFailure, slot)
		o.recovered[slot] = now
	}
	for s, at := range o.lastFailure {
		if now.Sub(at) > o.staleAfter {
			delete(o.lastFailure, s)
			o.recovered[s] = now
		}
	}
	left := int32(len(o.lastFailure))
	if o.down.Swap(left) != 0 && left == 0 {
		o.log.Info("redis is reachable again")
	}
}

// failed notes a call on key, begun at started (zero: unknown), that Redis
// did not answer, and logs the start of an outage when no slot was down.
func (o *outages) failed(key string, err error, started time.Time) {
	slot := o.slotOf(key)
	now := o.now()
	o.mu.Lock()
	defer o.mu.Unlock()
	if !started.IsZero() && started.Before(o.recovered[slot]) {
		return // news from before the slot answered again
	}
	o.lastFailure[slot] = now
	if o.down.Swap(int32(len(o.lastFailure))) == 0 {
		if slotMoving(err) {
			// Redirects the client could not follow in its attempts: a
			// slot half-way through a move (ASK, TRYAGAIN), or nodes not
			// yet agreeing on its new owner (MOVED).
			o.log.Warn("redis cluster slot is moving between primaries; calls to it fail until the move settles", "err", err)
		} else {
			o.log.Error("redis is unreachable", "err", err)
		}
	}
}

// any reports whether a slot is down: whether Redis, or a primary of a
// cluster, is not answering.
func (o *outages) any() bool { return o.down.Load() != 0 }
