package routers

import (
	"net/http"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
)

// jobView is the data of /get. The first five fields are the original's,
// with delay = the due time in absolute unix seconds; the rest are new.
// Every time comes in unix seconds and, with the _ms suffix, milliseconds.
type jobView struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	Delay int64  `json:"delay"`
	TTR   int64  `json:"ttr"`
	Body  string `json:"body"`
	// DelayMS is the due time in unix milliseconds.
	DelayMS     int64  `json:"delay_ms"`
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	CreatedAt   int64  `json:"created_at"` // 0 when unknown
	CreatedAtMS int64  `json:"created_at_ms"`
	MaxAttempts int    `json:"max_attempts"`
	Retry       []int  `json:"retry"` // [] without a schedule
	// AttemptsLimit is the deliveries the job gets before the dead
	// letters, as the engine enforces it: max_attempts (kept as pushed),
	// else len(retry)+1 with a schedule (a callback job pushed without
	// either was given the default backoff); 0 is unlimited.
	AttemptsLimit int `json:"attempts_limit"`
	// Only for a reserved job: the end of its lease.
	LeaseUntil   *int64 `json:"lease_until,omitempty"`
	LeaseUntilMS *int64 `json:"lease_until_ms,omitempty"`
	// Only for a dead job.
	DeadReason string `json:"dead_reason,omitempty"`
	DeadAt     *int64 `json:"dead_at,omitempty"`
	DeadAtMS   *int64 `json:"dead_at_ms,omitempty"`
	// Only for a webhook job: its callback, and the outcome of its last
	// failed call (status 0 when no answer came).
	Callback     *delayqueue.Callback `json:"callback,omitempty"`
	LastStatus   *int                 `json:"last_status,omitempty"`
	LastError    string               `json:"last_error,omitempty"`
	LastResponse string               `json:"last_response,omitempty"`
}

func newJobView(info *delayqueue.JobInfo) jobView {
	view := jobView{
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
		view.Callback = info.Callback
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
	succeed(w, r, "ok", newJobView(info))
}
