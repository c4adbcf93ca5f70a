package delayqueue

import "time"

// Observer receives the engine's events, for metrics. Its methods are
// called on hot paths from many goroutines: they must be cheap and safe for
// concurrent use. Counts are of this process' work.
type Observer interface {
	// JobsPushed counts jobs stored by push (created or replaced).
	JobsPushed(topic string, n int)
	// JobDelivered counts a delivery; attempts > 1 is a redelivery.
	JobDelivered(topic string, attempts int)
	JobsFinished(topic string, n int)
	JobsDeleted(topic string, n int)
	JobsDeadLettered(topic string, n int)
	// LeaseExpired counts deliveries that ended because ttr ran out.
	LeaseExpired(topic string)
	// ScanLag reports how late a scan moved the oldest due job it found.
	ScanLag(lag time.Duration)
	// RedisError counts failures to talk to Redis.
	RedisError()
	// LoopError counts failed rounds of a background loop (LoopScanner,
	// LoopDispatcher, LoopDeadSweeper), whatever the error.
	LoopError(loop string)
}

// NopObserver ignores every event.
type NopObserver struct{}

func (NopObserver) JobsPushed(string, int)       {}
func (NopObserver) JobDelivered(string, int)     {}
func (NopObserver) JobsFinished(string, int)     {}
func (NopObserver) JobsDeleted(string, int)      {}
func (NopObserver) JobsDeadLettered(string, int) {}
func (NopObserver) LeaseExpired(string)          {}
func (NopObserver) ScanLag(time.Duration)        {}
func (NopObserver) RedisError()                  {}
func (NopObserver) LoopError(string)             {}

// HeldPops is the number of Pops this process holds right now.
func (q *Queue) HeldPops() int { return int(q.held.Load()) }
