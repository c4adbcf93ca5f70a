// Package delayqueue owns the job engine: the Redis key schema and its
// partitions, the Lua scripts that perform every state change, the
// scanners that make due jobs ready, and the dispatch loops that hand ready
// jobs to waiting consumers. It knows nothing of HTTP.
package delayqueue

import (
	"errors"
	"fmt"
	"time"

	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/wire"
)

// Job states, as stored in Redis and reported by Get. They are the API's
// words (package wire), which the HTTP layer passes on as they are; the
// scripts store the same words (scripts/lib.lua), so a change of one is a
// change of the API and of the Redis layout.
const (
	StateDelay    = wire.StateDelay
	StateReady    = wire.StateReady
	StateReserved = wire.StateReserved
	StateDead     = wire.StateDead
)

// Dead-letter reasons.
const (
	ReasonTTRExpired = "ttr-expired"
	ReasonReleased   = "released"
	// ReasonCallbackFailed: the webhook never answered 2xx within the job's
	// attempts.
	ReasonCallbackFailed = "callback-failed"
)

// Limits the engine enforces (the HTTP layer checks them first, with
// friendlier messages).
const (
	MaxTopicBytes = 128
	MaxIDBytes    = 256
	MaxDelay      = time.Duration(1<<31-1) * time.Second
	MaxTTR        = 86400 * time.Second
	MaxPopTopics  = 100
)

// Sentinel errors. Routers map them to responses.
var (
	// ErrInvalidJob reports a job or request the engine refuses.
	ErrInvalidJob = errors.New("invalid job")
	// ErrUnavailable wraps every failure to talk to Redis (it is
	// redisconn's, so that both packages' failures match it).
	ErrUnavailable = redisconn.ErrUnavailable
	// ErrClosed is returned once the queue is shutting down.
	ErrClosed = errors.New("queue is shutting down")
	// ErrNotFound reports an unknown job id where one is needed.
	ErrNotFound = errors.New("job not found")
	// ErrDead reports an operation refused because the job is dead-lettered.
	ErrDead = errors.New("job is dead-lettered")
	// ErrNotReserved reports a release or touch of a job nobody holds.
	ErrNotReserved = errors.New("job is not reserved")
	// ErrStaleDelivery reports a release or touch carrying an attempt number
	// that is not the job's current delivery.
	ErrStaleDelivery = errors.New("stale delivery")
	// ErrWebhookJob reports a consumer's release of a webhook job: the
	// dispatcher that calls it ends its delivery (a second instance would
	// call it while the first call runs).
	ErrWebhookJob = errors.New("job is a webhook job")
	// ErrNotReplicated reports a change Redis made but could not copy to
	// the replicas asked for in time: the client should retry it.
	ErrNotReplicated = errors.New("change not acknowledged by enough redis replicas")
	// ErrRedisFull reports a change Redis refused because its memory is
	// full (maxmemory, with the noeviction policy): the client may retry
	// once memory is freed or raised. Redis refuses a script for lack of
	// memory only before its first write, so the call changed nothing.
	ErrRedisFull = errors.New("redis is out of memory")
	// ErrTooManyWaiters reports a Pop refused because the process already
	// holds its maximum of waiting Pops.
	ErrTooManyWaiters = errors.New("too many held pops")
	// ErrStarting reports a call made before Run finished bringing older
	// layouts' jobs over; it wraps ErrUnavailable, so clients retry.
	ErrStarting = fmt.Errorf("%w: the server is starting: migrating jobs to the current layout", ErrUnavailable)
	// ErrPartial reports a call spanning partitions of which only some
	// succeeded (see PushBatch).
	ErrPartial = errors.New("partly done")
)

// Job is what a producer pushes.
type Job struct {
	Topic string
	ID    string
	// Delay before the job becomes ready; millisecond granularity, 0 means now.
	Delay time.Duration
	// TTR is how long a delivery may last before the job is delivered again.
	TTR  time.Duration
	Body string
	// Retry is the schedule of waits (seconds) before each redelivery.
	Retry []int
	// MaxAttempts limits deliveries; 0 is unlimited, or len(Retry)+1 with a
	// schedule.
	MaxAttempts int
	// IfAbsent leaves an existing job with the same id alone.
	IfAbsent bool
	// Callback, when set, makes the server deliver the job by calling a URL
	// instead of handing it to /pop.
	Callback *Callback
}

// Callback is where and how a job with a webhook is delivered.
type Callback struct {
	URL             string            `json:"url"`
	Method          string            `json:"method,omitempty"`
	Headers         map[string]string `json:"headers,omitempty"`
	TimeoutSeconds  int               `json:"timeout,omitempty"`
	FollowRedirects bool              `json:"follow_redirects,omitempty"`
}

// Delivery is a job handed to a consumer by Pop.
type Delivery struct {
	ID       string
	Topic    string
	Body     string
	TTR      time.Duration
	Attempts int // deliveries so far, this one included
}

// JobInfo is the stored view of a job, returned by Get.
type JobInfo struct {
	ID        string
	Topic     string
	Body      string
	TTR       time.Duration
	DueAt     time.Time // when the job was (or will be) first ready
	State     string
	Attempts  int
	CreatedAt time.Time
	// LeaseUntil is the end of the current delivery, for reserved jobs.
	LeaseUntil  time.Time
	Retry       []int
	MaxAttempts int
	// DeadReason and DeadAt are set for dead-lettered jobs.
	DeadReason string
	DeadAt     time.Time
	// Callback and the outcome of its last failed call, for webhook jobs.
	Callback     *Callback
	LastStatus   int
	LastError    string
	LastResponse string
}

// AttemptsLimit is the number of deliveries after which the job goes to the
// dead letters, the rule attempts_limit in scripts/lib.lua (section retry) enforces:
// MaxAttempts when set, else len(Retry)+1 with a schedule, else 0
// (unlimited). A callback job pushed without either was stored with
// DefaultCallbackRetry, so its limit is len(DefaultCallbackRetry)+1.
func (j *JobInfo) AttemptsLimit() int {
	if j.MaxAttempts > 0 || len(j.Retry) == 0 {
		return j.MaxAttempts
	}
	return len(j.Retry) + 1
}
