package routers

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/wire"
)

// maxAttemptNumber bounds the "attempt" of /release, /touch and /finish.
const maxAttemptNumber = math.MaxInt32

// attemptField returns the "attempt" of a /release, /touch or /finish body:
// the delivery the request is about, 0 when absent (not checked).
func (o jsonObject) attemptField() (int, error) {
	attempt, err := o.intField("attempt", 1, maxAttemptNumber, "the attempts of the delivery, as /pop gave them")
	return int(attempt), err
}

// leaseRequest is the body of /release and /touch. Delay (release only) is
// nil when absent: the retry schedule then decides the next wait. Attempt is
// 0 when absent: the delivery is then not checked.
type leaseRequest struct {
	ID      string
	Delay   *time.Duration
	Attempt int
}

// decodeLease parses and validates a /release (withDelay) or /touch body.
func decodeLease(body []byte, withDelay bool) (leaseRequest, error) {
	fields := []string{"id", "attempt"}
	if withDelay {
		fields = append(fields, "delay")
	}
	obj, err := parseObject(body, fields...)
	if err != nil {
		return leaseRequest{}, err
	}
	idReq, err := decodeIDObject(obj)
	if err != nil {
		return leaseRequest{}, err
	}
	req := leaseRequest{ID: idReq.ID}
	if withDelay && obj.has("delay") {
		seconds, err := obj.intField("delay", 0, maxDelaySeconds, "seconds")
		if err != nil {
			return leaseRequest{}, err
		}
		delay := time.Duration(seconds) * time.Second
		req.Delay = &delay
	}
	req.Attempt, err = obj.attemptField()
	if err != nil {
		return leaseRequest{}, err
	}
	return req, nil
}

// release ends a delivery as failed: the job follows its retry schedule,
// or the given delay, or goes to the dead letters when its attempts are
// used up.
func (h *handler) release(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeLease(body, true)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, "", req.ID)
	state, due, err := h.queue.Release(r.Context(), req.ID, req.Delay, req.Attempt)
	if err != nil {
		h.failLeaseChange(w, r, "release", err, state, req.Attempt)
		return
	}
	message := "released"
	if state == delayqueue.StateDead {
		message = "released; its attempts are used up, so the job is dead-lettered"
	}
	succeed(w, r, message, wire.ReleaseResult{State: state, Due: wire.UnixSeconds(due), DueMS: wire.UnixMillis(due)})
}

// touch extends the lease of a reserved job to now + ttr, for long work.
func (h *handler) touch(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeLease(body, false)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, "", req.ID)
	state, until, err := h.queue.Touch(r.Context(), req.ID, req.Attempt)
	if err != nil {
		h.failLeaseChange(w, r, "touch", err, state, req.Attempt)
		return
	}
	succeed(w, r, "touched", wire.TouchResult{LeaseUntil: wire.UnixSeconds(until), LeaseUntilMS: wire.UnixMillis(until)})
}

// failLeaseChange answers a refused release, touch or checked finish with
// the detail the request and the engine give: the state found, the attempt
// sent.
func (h *handler) failLeaseChange(w http.ResponseWriter, r *http.Request, op string, err error, state string, attempt int) {
	switch {
	case errors.Is(err, delayqueue.ErrNotReserved) && state != "" && state != delayqueue.StateReserved:
		fail(w, r, fmt.Sprintf("%s (it is %s)", msgNotReserved, state))
	case errors.Is(err, delayqueue.ErrStaleDelivery) && attempt > 0:
		fail(w, r, fmt.Sprintf(msgStaleAttempt, attempt))
	default:
		h.failQueue(w, r, op, err)
	}
}
