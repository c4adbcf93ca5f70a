package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/delay-queue/delay-queue/internal/pause"
)

// Worker defaults.
const (
	// DefaultPollTimeout is the hold of each /pop a Worker sends. It must
	// not exceed the server's queue_block_timeout (178 s by default).
	DefaultPollTimeout = 30 * time.Second
	// maxBackoff caps DefaultBackoff.
	maxBackoff = time.Minute
	// popRetryMin and popRetryMax bound the wait after a failed /pop.
	popRetryMin = 100 * time.Millisecond
	popRetryMax = 5 * time.Second
	// earlyEmptyWait is the pause after a /pop that came back empty well
	// before its hold ended: a server that is shutting down answers at
	// once, and popping again at once would spin.
	earlyEmptyWait = time.Second
)

// Log attribute keys, as the server uses them.
const (
	logKeyJobID    = "job_id"
	logKeyTopic    = "topic"
	logKeyAttempts = "attempts"
	logKeyErr      = "err"
)

// ErrLeaseLost is the cause of a handler's context when the worker learns
// that the delivery is no longer its own (its lease ran out and the job was
// delivered again, or it was deleted or finished meanwhile).
var ErrLeaseLost = errors.New("lease of the delivery lost")

// ErrWorkerStopped is the cause of a handler's context when Run's context
// ended and StopTimeout ran out before the handler returned.
var ErrWorkerStopped = errors.New("worker stopped")

// DefaultBackoff is the wait before a job without a retry schedule is
// delivered again after its handler failed: 1 s after the first delivery,
// doubling with each delivery, at most one minute.
func DefaultBackoff(attempts int) time.Duration {
	if attempts < 1 {
		attempts = 1
	}
	if attempts > 7 { // 2^6 s is past the cap already
		return maxBackoff
	}
	return min(time.Second<<(attempts-1), maxBackoff)
}

// RetryAfter wraps a handler error to choose when the job is delivered
// again: the worker releases it with this delay, overriding both the job's
// retry schedule and the Backoff.
func RetryAfter(delay time.Duration, err error) error {
	return &retryAfterError{delay: delay, err: err}
}

type retryAfterError struct {
	delay time.Duration
	err   error
}

func (e *retryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", e.err, e.delay)
}

func (e *retryAfterError) Unwrap() error { return e.err }

// Worker consumes jobs of some topics with a handler. Fill in Client,
// Topics and Handler, then call Run.
//
// For each delivery, Run calls Handler and then:
//   - on a nil error, finishes the job;
//   - on an error or a panic, releases the job with the delivery's receipt
//     (its attempts). A job pushed with a retry schedule is then due after
//     the schedule's next wait (the worker learns whether there is one with
//     a /get). A job without one would be ready again at once, so the
//     worker sets the release delay to Backoff(attempts) instead, to avoid
//     a hot loop of failures. RetryAfter picks the delay explicitly.
//
// While a handler runs longer than half the job's ttr, the worker touches
// the job every ttr/2 so it is not delivered to anyone else. If the server
// says the delivery is no longer ours, the handler's context is canceled
// with ErrLeaseLost; if the handler still returns nil the job is finished
// (the work is done), and an error is only logged (a release would be
// refused as stale).
//
// Delivery is at least once: a handler may see a job again, for example
// after a crash before the finish arrived, so handlers should be idempotent.
type Worker struct {
	// Client is the server to consume from. Required.
	Client *Client
	// Topics to pop from; when several have jobs, the first listed wins.
	// Required.
	Topics []string
	// Concurrency is how many jobs are handled at once, each by its own
	// goroutine that long-polls /pop. Zero means 1.
	Concurrency int
	// Handler processes one job. Required. Its context is not canceled
	// when Run's context ends (in-flight jobs are allowed to complete, see
	// StopTimeout), only when the lease is lost or StopTimeout runs out.
	Handler func(ctx context.Context, job Job) error
	// Logger receives the worker's logs; nil discards them.
	Logger *slog.Logger
	// PollTimeout is the hold of each /pop (DefaultPollTimeout when zero).
	// It must not exceed the server's queue_block_timeout.
	PollTimeout time.Duration
	// Backoff gives the release delay after a failed delivery of a job
	// that has no retry schedule, from the delivery's attempts (this
	// delivery included). Nil means DefaultBackoff.
	Backoff func(attempts int) time.Duration
	// StopTimeout bounds how long handlers in flight may keep running once
	// Run's context has ended; then their context is canceled with
	// ErrWorkerStopped, and a job whose handler then fails is released
	// with no delay, for another worker to take. Zero means no bound: Run
	// waits for them.
	StopTimeout time.Duration
}

// Run consumes jobs until ctx ends. Then it stops popping (canceling the
// long polls in flight), waits for the handlers in flight (see
// StopTimeout) to finish or release their jobs, and returns nil. It returns
// an error at once for an incomplete Worker, and when the server refuses
// the pops for good (HTTP 401, 403, 404 or 405: a wrong token, origin or
// URL). Other failures (server unreachable, Redis unavailable) are logged
// and retried with a growing wait. An invalid topic or a PollTimeout over
// the server's queue_block_timeout is an error too.
func (w *Worker) Run(ctx context.Context) error {
	switch {
	case w.Client == nil:
		return errors.New("worker: Client is required")
	case len(w.Topics) == 0:
		return errors.New("worker: Topics is required")
	case w.Handler == nil:
		return errors.New("worker: Handler is required")
	}
	r := &workerRun{
		w:           w,
		logger:      w.Logger,
		pollTimeout: w.PollTimeout,
		backoff:     w.Backoff,
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	if r.pollTimeout <= 0 {
		r.pollTimeout = DefaultPollTimeout
	}
	if r.backoff == nil {
		r.backoff = DefaultBackoff
	}
	concurrency := max(w.Concurrency, 1)

	popCtx, stopPopping := context.WithCancelCause(ctx)
	defer stopPopping(nil)
	// Handlers outlive the end of ctx: an interrupted job would only be
	// delivered again after its ttr.
	handlerCtx, stopHandlers := context.WithCancelCause(context.WithoutCancel(ctx))
	defer stopHandlers(nil)

	var loops sync.WaitGroup
	for range concurrency {
		loops.Go(func() { r.consume(popCtx, stopPopping, handlerCtx) })
	}
	loopsDone := make(chan struct{})
	go func() {
		loops.Wait()
		close(loopsDone)
	}()

	select {
	case <-loopsDone:
	case <-popCtx.Done():
		if w.StopTimeout > 0 {
			timer := time.NewTimer(w.StopTimeout)
			select {
			case <-loopsDone:
			case <-timer.C:
				r.logger.Warn("stop timeout reached: canceling the handlers still running", "stop_timeout", w.StopTimeout)
				stopHandlers(ErrWorkerStopped)
			}
			timer.Stop()
		}
		<-loopsDone
	}
	if cause := context.Cause(popCtx); ctx.Err() == nil && cause != nil {
		return cause
	}
	return nil
}

// workerRun is the state of one Run, with the defaults applied.
type workerRun struct {
	w           *Worker
	logger      *slog.Logger
	pollTimeout time.Duration
	backoff     func(attempts int) time.Duration
}

// consume is one long-polling loop: pop a job, handle it, repeat.
func (r *workerRun) consume(ctx context.Context, stop context.CancelCauseFunc, handlerCtx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		started := time.Now()
		job, err := r.w.Client.Pop(ctx, r.w.Topics, r.pollTimeout)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if refusedForGood(err) {
				hint := ""
				if strings.Contains(err.Error(), "timeout") {
					hint = " (Worker.PollTimeout must not exceed the server's queue_block_timeout)"
				}
				stop(fmt.Errorf("worker: the server refuses pops%s: %w", hint, err))
				return
			}
			failures++
			wait := min(popRetryMin<<min(failures-1, 10), popRetryMax)
			r.logger.Warn("pop failed, retrying", logKeyErr, err.Error(), "retry_in", wait)
			_ = pause.For(ctx, wait)
			continue
		}
		failures = 0
		if job == nil {
			if time.Since(started) < r.pollTimeout/2 {
				_ = pause.For(ctx, earlyEmptyWait)
			}
			continue
		}
		r.handle(handlerCtx, *job)
	}
}

// refusedForGood reports a /pop refusal that no retry will heal: a wrong
// token, origin or URL, or a request the server finds invalid (its
// validation messages start with the field they name, such as "timeout
// must be an integer between 0 and 178"). Redis being unavailable or the
// server shutting down are not among them.
func refusedForGood(err error) bool {
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.HTTPStatus {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed:
		return true
	case http.StatusOK:
		for _, field := range []string{"topic", "timeout"} {
			if strings.HasPrefix(apiErr.Message, field+" ") {
				return true
			}
		}
	}
	return false
}

// sleep waits for d or until ctx ends.
// handle runs the handler on one delivery and finishes or releases it.
func (r *workerRun) handle(parent context.Context, job Job) {
	logger := r.logger.With(logKeyJobID, job.ID, logKeyTopic, job.Topic, logKeyAttempts, job.Attempts)
	jobCtx, cancelJob := context.WithCancelCause(parent)
	defer cancelJob(nil)

	leaseKept := make(chan struct{})
	go func() {
		defer close(leaseKept)
		r.keepLease(jobCtx, cancelJob, job, logger)
	}()
	started := time.Now()
	err := r.runHandler(jobCtx, job)
	cancelJob(nil) // stops keepLease; a cause set earlier stays
	<-leaseKept
	elapsed := time.Since(started)

	// The outcome is reported even while the worker stops.
	ackCtx := context.WithoutCancel(parent)
	if err == nil {
		if err := r.w.Client.Finish(ackCtx, job.ID); err != nil {
			logger.Warn("finish failed: the job will be delivered again after its ttr", logKeyErr, err.Error())
			return
		}
		logger.Debug("job done", "elapsed", elapsed)
		return
	}

	opts := ReleaseOptions{Attempt: job.Attempts}
	if errors.Is(context.Cause(jobCtx), ErrWorkerStopped) {
		// Not the job's fault: let another worker take it at once.
		opts.Delay = new(time.Duration(0))
	} else {
		opts.Delay = r.releaseDelay(ackCtx, job, err, logger)
	}
	result, releaseErr := r.w.Client.Release(ackCtx, job.ID, opts)
	switch {
	case IsLeaseLost(releaseErr):
		logger.Info("handler failed, and the delivery is no longer ours: not released",
			logKeyErr, err.Error(), "release_err", releaseErr.Error())
	case releaseErr != nil:
		logger.Warn("handler failed, and the release failed: the job will be delivered again after its ttr",
			logKeyErr, err.Error(), "release_err", releaseErr.Error())
	default:
		logger.Warn("handler failed: job released", logKeyErr, err.Error(),
			"state", result.State, "due", result.Due, "elapsed", elapsed)
	}
}

// runHandler calls the handler, turning a panic into an error.
func (r *workerRun) runHandler(ctx context.Context, job Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.logger.Error("handler panicked", logKeyJobID, job.ID, logKeyTopic, job.Topic,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return r.w.Handler(ctx, job)
}

// keepLease touches the job every ttr/2 until ctx ends, so that a handler
// running longer than its ttr keeps the job. When the server says the
// delivery is gone, it cancels the handler's context with ErrLeaseLost.
func (r *workerRun) keepLease(ctx context.Context, cancelJob context.CancelCauseFunc, job Job, logger *slog.Logger) {
	interval := job.TTR / 2
	if interval <= 0 {
		return
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		leaseUntil, err := r.w.Client.Touch(ctx, job.ID, job.Attempts)
		switch {
		case ctx.Err() != nil:
			return
		case IsLeaseLost(err):
			logger.Warn("lease lost: canceling the handler", logKeyErr, err.Error())
			cancelJob(ErrLeaseLost)
			return
		case err != nil:
			// Transient: the next tick tries again, still within the ttr.
			logger.Warn("touch failed", logKeyErr, err.Error())
		default:
			logger.Debug("lease extended", "lease_until", leaseUntil)
		}
	}
}

// releaseDelay picks the delay of the release after a failed delivery:
// nil to follow the job's retry schedule, Backoff(attempts) when it has
// none, or the one the handler chose with RetryAfter.
func (r *workerRun) releaseDelay(ctx context.Context, job Job, handlerErr error, logger *slog.Logger) *time.Duration {
	if ra, ok := errors.AsType[*retryAfterError](handlerErr); ok {
		return new(max(ra.delay, 0))
	}
	info, err := r.w.Client.Get(ctx, job.ID)
	if err != nil {
		// Without knowing, a backoff is the safe side: a hot loop of
		// failures is worse than a schedule stretched or shortened once.
		logger.Warn("could not read the job's retry schedule: releasing with the backoff", logKeyErr, err.Error())
	}
	if info != nil && len(info.Retry) > 0 {
		return nil
	}
	return new(max(r.backoff(job.Attempts), 0))
}
