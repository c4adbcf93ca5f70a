package routers

import (
	"net/http"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/wire"
)

// newJobInfo is the engine's view of a job as /get answers it.
func newJobInfo(info *delayqueue.JobInfo) wire.JobInfo {
	view := wire.JobInfo{
		Topic:       info.Topic,
		ID:          info.ID,
		Delay:       unixSeconds(info.DueAt),
		TTR:         int64(info.TTR / time.Second),
		Body:        info.Body,
		DelayMS:     unixMillis(info.DueAt),
		State:       info.State,
		Attempts:    info.Attempts,
		CreatedAt:   unixSeconds(info.CreatedAt),
		CreatedAtMS: unixMillis(info.CreatedAt),
		MaxAttempts: info.MaxAttempts,
		Retry:       info.Retry,
	}
	view.AttemptsLimit = info.AttemptsLimit()
	if view.Retry == nil {
		view.Retry = []int{}
	}
	if info.Callback != nil {
		view.Callback = newCallback(info.Callback)
		if info.LastStatus != 0 || info.LastError != "" {
			status := info.LastStatus
			view.LastStatus = &status
		}
		view.LastError, view.LastResponse = info.LastError, info.LastResponse
	}
	switch info.State {
	case delayqueue.StateReserved:
		view.LeaseUntil, view.LeaseUntilMS = timePair(info.LeaseUntil)
	case delayqueue.StateDead:
		view.DeadReason = info.DeadReason
		view.DeadAt, view.DeadAtMS = timePair(info.DeadAt)
	}
	return view
}

// newCallback is a job's callback as /get answers it.
// TestCallbackAnswersEveryField keeps it to every field of the engine's.
func newCallback(cb *delayqueue.Callback) *wire.Callback {
	return &wire.Callback{URL: cb.URL, Method: cb.Method, Headers: cb.Headers,
		TimeoutSeconds: cb.TimeoutSeconds, FollowRedirects: cb.FollowRedirects}
}

// timePair returns t in unix seconds and milliseconds, both nil when t is
// unknown, so that the fields are left out rather than 0.
func timePair(t time.Time) (seconds, millis *int64) {
	if t.IsZero() {
		return nil, nil
	}
	s, ms := t.Unix(), t.UnixMilli()
	return &s, &ms
}

// unixSeconds and unixMillis map the zero time (unknown, e.g. for a job
// imported from the original server) to 0 rather than year 1.
func unixSeconds(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func unixMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// get returns a job's stored view, or data null for an unknown id.
func (h *handler) get(w http.ResponseWriter, r *http.Request) {
	body, ok := h.readBody(w, r)
	if !ok {
		return
	}
	req, err := decodeID(body)
	if err != nil {
		fail(w, r, err.Error())
		return
	}
	noteJob(r, "", req.ID)
	info, err := h.queue.Get(r.Context(), req.ID)
	if err != nil {
		h.failQueue(w, r, "get", err)
		return
	}
	if info == nil {
		succeed(w, r, "job not found", nil)
		return
	}
	noteJob(r, info.Topic, "")
	succeed(w, r, "ok", newJobInfo(info))
}
