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
		Delay:       wire.UnixSeconds(info.DueAt),
		TTR:         int64(info.TTR / time.Second),
		Body:        info.Body,
		DelayMS:     wire.UnixMillis(info.DueAt),
		State:       info.State,
		Attempts:    info.Attempts,
		CreatedAt:   wire.UnixSeconds(info.CreatedAt),
		CreatedAtMS: wire.UnixMillis(info.CreatedAt),
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
		view.LeaseUntil, view.LeaseUntilMS = wire.OptionalUnixPair(info.LeaseUntil)
	case delayqueue.StateDead:
		view.DeadReason = info.DeadReason
		view.DeadAt, view.DeadAtMS = wire.OptionalUnixPair(info.DeadAt)
	}
	return view
}

// newCallback is a job's callback as /get answers it.
// TestCallbackAnswersEveryField keeps it to every field of the engine's.
func newCallback(cb *delayqueue.Callback) *wire.Callback {
	return &wire.Callback{URL: cb.URL, Method: cb.Method, Headers: cb.Headers,
		TimeoutSeconds: cb.TimeoutSeconds, FollowRedirects: cb.FollowRedirects}
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
