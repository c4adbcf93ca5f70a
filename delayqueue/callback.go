package delayqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Callback limits and defaults.
const (
	DefaultCallbackTimeout = 10 * time.Second
	MaxCallbackTimeout     = 300 * time.Second
	// callbackLeaseMargin is added to a call's timeout for its lease, so a
	// slow call is not made again while it may still succeed.
	callbackLeaseMargin = 10 * time.Second
)

// DefaultCallbackRetry is the backoff of a callback job pushed without a
// retry schedule or max_attempts: 6 calls in all, then the dead letters.
var DefaultCallbackRetry = []int{10, 60, 300, 1800, 3600}

// Validate checks a callback's URL, method, headers and timeout. Its errors
// wrap ErrInvalidJob. (Whether the address may be called is checked when
// the call is made, after DNS resolution.)
func (c *Callback) Validate() error {
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%w: callback.url must be an absolute http or https URL", ErrInvalidJob)
	}
	if u.User != nil {
		return fmt.Errorf("%w: callback.url must not carry credentials; use callback.headers", ErrInvalidJob)
	}
	switch c.Method {
	case "", http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		return fmt.Errorf("%w: callback.method must be POST, PUT or PATCH", ErrInvalidJob)
	}
	for name, value := range c.Headers {
		canonical := http.CanonicalHeaderKey(name)
		if name == "" || strings.ContainsAny(name, " \t\r\n:") || strings.ContainsAny(value, "\r\n\x00") {
			return fmt.Errorf("%w: callback.headers has an invalid header %q", ErrInvalidJob, name)
		}
		if strings.HasPrefix(canonical, "X-Delayqueue-") || canonical == "Host" || canonical == "Content-Length" {
			return fmt.Errorf("%w: callback.headers may not set %s", ErrInvalidJob, name)
		}
	}
	if c.TimeoutSeconds < 0 || time.Duration(c.TimeoutSeconds)*time.Second > MaxCallbackTimeout {
		return fmt.Errorf("%w: callback.timeout must be between 1 and %d seconds", ErrInvalidJob, int(MaxCallbackTimeout/time.Second))
	}
	return nil
}

// Timeout is the callback's time limit for one call.
func (c *Callback) Timeout() time.Duration {
	if c.TimeoutSeconds <= 0 {
		return DefaultCallbackTimeout
	}
	return time.Duration(c.TimeoutSeconds) * time.Second
}

func callbackLease(c *Callback) time.Duration { return c.Timeout() + callbackLeaseMargin }

// CallbackDelivery is a webhook job claimed for one call.
type CallbackDelivery struct {
	ID       string
	Topic    string
	Attempts int // this call's number, from 1
	Body     string
	Callback Callback
	// CreatedMS is the job's creation time in ms: with Attempts, the
	// receipt the call reports its outcome with. A job pushed again under
	// the same id counts its attempts from 1 again, with a new creation
	// time.
	CreatedMS int64
}

// ClaimCallbacks leases up to count ready webhook jobs to the caller, from
// the partitions in turn, starting at the next one of the rotation.
func (q *Queue) ClaimCallbacks(ctx context.Context, count int) ([]CallbackDelivery, error) {
	if err := q.started(ctx); err != nil {
		return nil, fmt.Errorf("claim callbacks: %w", err)
	}
	n := len(q.partitions)
	start := int(q.nextClaim.Add(1) % uint32(n))
	var (
		out     []CallbackDelivery
		lastErr error
	)
	for i := 0; i < n && len(out) < count; i++ {
		p := q.partitions[(start+i)%n]
		got, err := q.claimCallbacksOn(ctx, p, count-len(out))
		out = append(out, got...)
		if err != nil {
			lastErr = err
		}
	}
	if len(out) == 0 && lastErr != nil {
		return nil, lastErr
	}
	return out, nil
}

func (q *Queue) claimCallbacksOn(ctx context.Context, p *partition, count int) ([]CallbackDelivery, error) {
	reply, err := redis.Values(q.call(ctx, p, q.scripts.claimHook, nil, count))
	if err != nil {
		return nil, fmt.Errorf("claim callbacks: %w", err)
	}
	var out []CallbackDelivery
	for rest := reply[1:]; len(rest) >= 6; rest = rest[6:] {
		var (
			d  CallbackDelivery
			cb string
		)
		if _, err := redis.Scan(rest[:6], &d.ID, &d.Topic, &d.Attempts, &d.Body, &cb, &d.CreatedMS); err != nil {
			return out, fmt.Errorf("claim callbacks: reply: %w", err)
		}
		if err := json.Unmarshal([]byte(cb), &d.Callback); err != nil {
			q.log.Warn("stored callback is unreadable", "job_id", d.ID, "err", err)
		}
		out = append(out, d)
	}
	return out, nil
}

// WaitCallbacks waits until a callback job may be ready (a wake-up token
// came on some partition), for at most timeout or until ctx is done. It
// only wakes: ClaimCallbacks decides. The wait costs no Redis connection of
// its own: loop 0 of each partition's dispatch loops listens for the
// callback tokens while a dispatcher waits.
func (q *Queue) WaitCallbacks(ctx context.Context, timeout time.Duration) {
	woken, first := q.waiters.waitHooks()
	defer q.waiters.doneWaitingHooks()
	if first {
		q.wakeLoops([]int{0})
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-woken:
	case <-t.C:
	case <-ctx.Done():
	}
}

// WaitingForCallbacks reports whether a caller of this process waits in
// WaitCallbacks now, so that a callback job made ready will wake it. Tests
// of the wake-up wait on it before they push: a job pushed while the
// dispatcher is still claiming is taken by that claim, woken or not.
func (q *Queue) WaitingForCallbacks() bool { return q.waiters.hooksWanted() }

// CallbackSucceeded finishes the webhook job of delivery d, whose call
// answered 2xx. Its attempt and the job's creation time are the receipt: a
// job deleted, pushed again (even if called since, its attempts counting
// from 1 again) or whose lease ended during the call is left as it is now
// (ErrNotFound, ErrNotReserved, ErrStaleDelivery).
func (q *Queue) CallbackSucceeded(ctx context.Context, d CallbackDelivery) error {
	_, err := q.finishDelivery(ctx, d.ID, d.Attempts, d.CreatedMS)
	return err
}

// CallbackFailed ends a call as failed: the job follows its retry schedule
// or goes to the dead letters with reason callback-failed. status is the
// HTTP status (0 when none came), errText what went wrong, and response the
// start of the answer's body.
func (q *Queue) CallbackFailed(ctx context.Context, d CallbackDelivery, status int, errText, response string) (string, error) {
	state, _, err := q.leaseChange(ctx, "callback failed", q.scripts.release, d.ID, int64(-1), d.Attempts,
		ReasonCallbackFailed, status, errText, response, createdArg(d.CreatedMS))
	return state, err
}

// UnclaimCallback gives back a claimed webhook job that was not called (or
// whose call shutdown cut): it is ready again at once for another
// dispatcher, and the attempt is not counted. It reports whether the job was
// still held by that attempt.
func (q *Queue) UnclaimCallback(ctx context.Context, d CallbackDelivery) (bool, error) {
	n, err := redis.Int(q.call(ctx, q.partitionOf(d.ID), q.scripts.unclaim, nil, d.ID, d.Attempts, createdArg(d.CreatedMS)))
	if err != nil {
		return false, fmt.Errorf("unclaim callback %s: %w", d.ID, err)
	}
	return n == 1, nil
}
