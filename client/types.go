package client

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/delay-queue/delay-queue/wire"
)

// The values below and the types declared as aliases are the API's, from
// package wire, which the server writes its answers with: their names
// here are the ones this package has always had.

// Job states, as the server reports them in /get and /stats.
const (
	StateDelay    = wire.StateDelay
	StateReady    = wire.StateReady
	StateReserved = wire.StateReserved
	StateDead     = wire.StateDead
)

// Statuses of a job in a batch push result.
const (
	PushCreated  = wire.StatusCreated
	PushReplaced = wire.StatusReplaced
	PushExists   = wire.StatusExists // if_absent was set and the id existed: nothing changed
)

// Statuses of a job or id in a batch the server did only in part (see
// PartialBatchError), besides PushCreated, PushReplaced, PushExists and,
// for a dead-lettered job that /finish left alone, StateDead.
const (
	BatchFailed   = wire.StatusFailed   // not handled: its part of Redis was unavailable
	BatchFinished = wire.StatusFinished // /finish with ids
	BatchDeleted  = wire.StatusDeleted  // /delete with ids
	BatchUnknown  = wire.StatusUnknown  // /finish or /delete with ids: no such job
)

// PushJob is a job to push. Its JSON form is the API's: durations travel as
// whole seconds ("delay", "ttr", "retry"), except a Delay with a fraction of
// a second, which travels as "delay_ms". Durations between whole seconds
// are rounded up (a job is never made due earlier than asked).
type PushJob struct {
	Topic string
	ID    string
	// Delay before the job is ready; 0 means now.
	Delay time.Duration
	// TTR is how long one delivery may last before the job is delivered
	// again (1 s to 24 h).
	TTR  time.Duration
	Body string
	// Retry is the schedule of waits before each redelivery, such as
	// 2m, 10m, 10m, 1h. Without one, a failed delivery is ready again at
	// once.
	Retry []time.Duration
	// MaxAttempts limits deliveries: 0 means unlimited without a schedule,
	// len(Retry)+1 with one.
	MaxAttempts int
	// IfAbsent leaves an existing job with the same id untouched.
	IfAbsent bool
	// Callback makes the server deliver the job by calling a URL (a
	// webhook job) instead of handing it to Pop; such a job may leave TTR
	// at 0.
	Callback *Callback
}

// Callback is where and how the server calls a webhook job: its URL, and
// optionally the method, headers, timeout (seconds) and whether redirects
// are followed (see docs/webhooks.md).
type Callback = wire.Callback

// MarshalJSON writes the job as the API's /push object.
func (j PushJob) MarshalJSON() ([]byte, error) {
	return json.Marshal(j.wireForm())
}

// wireForm is the job as the API's /push object.
func (j PushJob) wireForm() wire.PushJob {
	w := wire.PushJob{
		Topic:       j.Topic,
		ID:          j.ID,
		Body:        j.Body,
		MaxAttempts: j.MaxAttempts,
		IfAbsent:    j.IfAbsent,
		Callback:    j.Callback,
	}
	// A webhook job's lease comes from its callback's timeout: without a
	// TTR of its own, it sends none.
	if j.TTR != 0 || j.Callback == nil {
		w.TTR = new(secondsUp(j.TTR))
	}
	if j.Delay%time.Second == 0 {
		w.Delay = new(int64(j.Delay / time.Second))
	} else {
		w.DelayMS = new(millisUp(j.Delay))
	}
	for _, wait := range j.Retry {
		w.Retry = append(w.Retry, secondsUp(wait))
	}
	return w
}

// pushJobWire is wire.PushJob under the name this package's decoding
// errors have always given it ("Go struct field pushJobWire.delay").
type pushJobWire wire.PushJob

// UnmarshalJSON reads an API /push object, such as a line of a JSON-lines
// file: "delay" in seconds or "delay_ms" (which wins), "ttr" and "retry" in
// seconds. Numbers must be integers.
func (j *PushJob) UnmarshalJSON(data []byte) error {
	var w pushJobWire
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*j = PushJob{
		Topic:       w.Topic,
		ID:          w.ID,
		Body:        w.Body,
		MaxAttempts: w.MaxAttempts,
		IfAbsent:    w.IfAbsent,
		Callback:    w.Callback,
	}
	if w.TTR != nil {
		j.TTR = time.Duration(*w.TTR) * time.Second
	}
	switch {
	case w.DelayMS != nil:
		j.Delay = time.Duration(*w.DelayMS) * time.Millisecond
	case w.Delay != nil:
		j.Delay = time.Duration(*w.Delay) * time.Second
	}
	for _, wait := range w.Retry {
		j.Retry = append(j.Retry, time.Duration(wait)*time.Second)
	}
	return nil
}

// PushResult is the outcome of one job of a batch push. Status is
// PushCreated, PushReplaced or PushExists; BatchFailed too when PushBatch
// also returns a *PartialBatchError.
type PushResult = wire.PushResult

// InvalidJob names a job of a rejected batch push (its position in the
// batch, from 0, and its id) and what is wrong with it.
type InvalidJob = wire.InvalidJob

// InvalidJobs returns the bad jobs listed by a batch push the server
// rejected, or nil when err is not such a rejection. Nothing of a rejected
// batch was stored. A batch stored in part is not a rejection: see
// PartialBatchError.
func InvalidJobs(err error) []InvalidJob {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Endpoint != "/push" {
		return nil
	}
	entries, ok := decodeBatchEntries(apiErr.Data)
	if !ok || entries[0].Status != nil {
		return nil
	}
	bad := make([]InvalidJob, len(entries))
	for i, e := range entries {
		bad[i] = InvalidJob{Index: e.Index, ID: e.ID, Message: e.Message}
	}
	return bad
}

// BatchResult is one job's or id's outcome in a batch the server did only
// in part. Index is the job's position in the batch, from 0; for /finish
// and /delete it counts the distinct ids, in the order first given (the
// position in ids when no id repeats). Status is PushCreated, PushReplaced
// or PushExists for a push; BatchFinished, BatchDeleted, BatchUnknown or
// StateDead for /finish and /delete; BatchFailed, with Message saying why,
// when the job or id was not handled.
type BatchResult = wire.BatchResult

// PartialBatchError is returned when the server handled only part of a
// batch push, or of a /finish or /delete with ids: the batch spans
// partitions, which are stored by one call each, and some of them could
// not be reached (a Redis node down, a failover under way). Unlike a
// rejected batch (InvalidJobs), part of it took effect. Results holds the
// outcome of every job or id, in batch order; Failed picks those that were
// not handled.
//
// Sending the whole batch again is safe: a job replaces the job with its
// own id (or, with IfAbsent, leaves it alone), and finishing or deleting
// an id twice is harmless. Sending only the failed part does less: the
// jobs already stored are not replaced, so their delay does not start
// again. The client retries neither by itself, since the failure usually
// lasts longer than a retry would wait, and only the caller knows whether
// the batch may wait.
//
// It wraps the server's *APIError (code 1), so errors.As with an *APIError
// still finds it.
type PartialBatchError struct {
	*APIError
	Results []BatchResult
}

// Unwrap returns the server's answer.
func (e *PartialBatchError) Unwrap() error { return e.APIError }

// Failed returns the results of the jobs or ids that were not handled.
func (e *PartialBatchError) Failed() []BatchResult {
	var failed []BatchResult
	for _, r := range e.Results {
		if r.Status == BatchFailed {
			failed = append(failed, r)
		}
	}
	return failed
}

// batchEntry is an element of the data of a failed batch: a rejected push
// lists its bad jobs with a message each (wire.InvalidJob); a batch done in
// part lists every job or id with its status (wire.BatchResult). Status, a
// pointer here, tells the two apart: it shadows the embedded one.
type batchEntry struct {
	wire.BatchResult
	Status *string `json:"status"`
}

// decodeBatchEntries reads data as a non-empty list of batch entries, all
// of one shape (all with a status, or none).
func decodeBatchEntries(data json.RawMessage) ([]batchEntry, bool) {
	if len(data) == 0 {
		return nil, false
	}
	var entries []batchEntry
	if json.Unmarshal(data, &entries) != nil || len(entries) == 0 {
		return nil, false
	}
	withStatus := entries[0].Status != nil
	for _, e := range entries {
		if (e.Status != nil) != withStatus {
			return nil, false
		}
	}
	return entries, true
}

// asPartialBatch turns an *APIError whose data lists every job's or id's
// status into a *PartialBatchError; other errors are returned as they are.
func asPartialBatch(err error) error {
	var apiErr *APIError
	if !errors.As(err, &apiErr) {
		return err
	}
	entries, ok := decodeBatchEntries(apiErr.Data)
	if !ok || entries[0].Status == nil {
		return err
	}
	partial := &PartialBatchError{APIError: apiErr, Results: make([]BatchResult, len(entries))}
	for i, e := range entries {
		partial.Results[i] = BatchResult{Index: e.Index, ID: e.ID, Status: *e.Status, Message: e.Message}
	}
	return partial
}

// Job is a delivered job, as /pop returns it. The job stays reserved for
// TTR: finish it, release it, or touch it to keep it longer. Attempts
// counts deliveries, this one included; pass it to Release and Touch as the
// delivery's receipt.
type Job struct {
	ID       string
	Topic    string
	Body     string
	TTR      time.Duration
	Attempts int
}

// MarshalJSON writes the job as /pop answers it (ttr in seconds).
func (j Job) MarshalJSON() ([]byte, error) {
	return json.Marshal(wire.Delivery{ID: j.ID, Body: j.Body, Topic: j.Topic, TTR: secondsUp(j.TTR), Attempts: j.Attempts})
}

// UnmarshalJSON reads a job as /pop answers it.
func (j *Job) UnmarshalJSON(data []byte) error {
	var w wire.Delivery
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*j = jobOf(w)
	return nil
}

// jobOf is the job a /pop delivery describes.
func jobOf(w wire.Delivery) Job {
	return Job{ID: w.ID, Topic: w.Topic, Body: w.Body, TTR: time.Duration(w.TTR) * time.Second, Attempts: w.Attempts}
}

// JobInfo is the stored view of a job, as /get answers it. Times the server
// did not report are zero.
type JobInfo struct {
	Topic string
	ID    string
	Body  string
	TTR   time.Duration
	// Due is when the job was (or will be) first ready.
	Due         time.Time
	State       string // StateDelay, StateReady, StateReserved or StateDead
	Attempts    int
	CreatedAt   time.Time
	MaxAttempts int
	Retry       []time.Duration
	// AttemptsLimit is the number of deliveries the job gets before the
	// dead letters, as the server enforces it: MaxAttempts (as pushed)
	// when set, else len(Retry)+1 with a schedule (a callback job pushed
	// without either has the default backoff, so 6); 0 is unlimited. It
	// is 0 from a server older than this field.
	AttemptsLimit int
	// LeaseUntil is the end of the current delivery, for a reserved job.
	LeaseUntil time.Time
	// DeadReason and DeadAt are set for a dead-lettered job.
	DeadReason string
	DeadAt     time.Time
}

// jobInfoOut is what JobInfo.MarshalJSON writes: /get's fields, with
// attempts_limit last, where this package has always written it (dqctl
// prints it; the server writes it after retry). It shadows the embedded
// field of the same name.
type jobInfoOut struct {
	wire.JobInfo
	AttemptsLimit int `json:"attempts_limit"`
}

// MarshalJSON writes the job with /get's fields. The client does not keep
// a webhook job's callback, so it is left out.
func (j JobInfo) MarshalJSON() ([]byte, error) {
	w := wire.JobInfo{
		Topic:       j.Topic,
		ID:          j.ID,
		TTR:         secondsUp(j.TTR),
		Body:        j.Body,
		State:       j.State,
		Attempts:    j.Attempts,
		MaxAttempts: j.MaxAttempts,
		Retry:       []int{},
		DeadReason:  j.DeadReason,
	}
	w.Delay, w.DelayMS = wire.UnixPair(j.Due)
	w.CreatedAt, w.CreatedAtMS = wire.UnixPair(j.CreatedAt)
	w.LeaseUntil, w.LeaseUntilMS = wire.OptionalUnixPair(j.LeaseUntil)
	w.DeadAt, w.DeadAtMS = wire.OptionalUnixPair(j.DeadAt)
	for _, wait := range j.Retry {
		w.Retry = append(w.Retry, int(secondsUp(wait)))
	}
	return json.Marshal(jobInfoOut{JobInfo: w, AttemptsLimit: j.AttemptsLimit})
}

// UnmarshalJSON reads a job as /get answers it.
func (j *JobInfo) UnmarshalJSON(data []byte) error {
	var w wire.JobInfo
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*j = JobInfo{
		Topic:         w.Topic,
		ID:            w.ID,
		Body:          w.Body,
		TTR:           time.Duration(w.TTR) * time.Second,
		Due:           wire.TimeOf(w.Delay, w.DelayMS),
		State:         w.State,
		Attempts:      w.Attempts,
		CreatedAt:     wire.TimeOf(w.CreatedAt, w.CreatedAtMS),
		MaxAttempts:   w.MaxAttempts,
		AttemptsLimit: w.AttemptsLimit,
		LeaseUntil:    wire.TimeOfOptional(w.LeaseUntil, w.LeaseUntilMS),
		DeadReason:    w.DeadReason,
		DeadAt:        wire.TimeOfOptional(w.DeadAt, w.DeadAtMS),
	}
	for _, wait := range w.Retry {
		j.Retry = append(j.Retry, time.Duration(wait)*time.Second)
	}
	return nil
}

// ReleaseOptions are the optional fields of a release.
type ReleaseOptions struct {
	// Delay, when set, replaces the wait the job's retry schedule would
	// give (new(30*time.Second) makes the job due in 30 s; new(time.Duration(0))
	// makes it ready now). Rounded up to whole seconds.
	Delay *time.Duration
	// Attempt is the delivery's receipt (Job.Attempts). When set, the server
	// refuses the release if the job has been delivered again since.
	Attempt int
}

// ReleaseResult says where a released job went.
type ReleaseResult struct {
	// State is StateDelay, StateReady, or StateDead when its attempts ran out.
	State string
	// Due is when the job is ready again (for StateDelay and StateReady).
	Due time.Time
}

// MarshalJSON writes the result as /release answers it.
func (r ReleaseResult) MarshalJSON() ([]byte, error) {
	w := wire.ReleaseResult{State: r.State}
	w.Due, w.DueMS = wire.UnixPair(r.Due)
	return json.Marshal(w)
}

// UnmarshalJSON reads the result as /release answers it.
func (r *ReleaseResult) UnmarshalJSON(data []byte) error {
	var w wire.ReleaseResult
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*r = ReleaseResult{State: w.State, Due: wire.TimeOf(w.Due, w.DueMS)}
	return nil
}

// FinishResult is the outcome of a batch finish: Finished counts the jobs
// finished now (not ids with no job, finished or deleted already); Dead
// lists the ids the server refused because they are dead-lettered.
type FinishResult = wire.FinishResult

// TopicStats counts a topic's jobs in each state.
type TopicStats = wire.TopicStats

// DeadJob is a dead-lettered job, as /dead/list answers it.
type DeadJob struct {
	ID        string
	Topic     string
	Body      string
	Attempts  int
	Reason    string // such as "ttr-expired" or "released"
	DeadAt    time.Time
	CreatedAt time.Time
}

// MarshalJSON writes the job as /dead/list answers it.
func (d DeadJob) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.wireForm())
}

// wireForm is the job as /dead/list answers it (without a webhook job's
// last call, which the client does not keep).
func (d DeadJob) wireForm() wire.DeadJob {
	w := wire.DeadJob{ID: d.ID, Topic: d.Topic, Body: d.Body, Attempts: d.Attempts, Reason: d.Reason}
	w.DeadAt, w.DeadAtMS = wire.UnixPair(d.DeadAt)
	w.CreatedAt, w.CreatedAtMS = wire.UnixPair(d.CreatedAt)
	return w
}

// UnmarshalJSON reads a job as /dead/list answers it.
func (d *DeadJob) UnmarshalJSON(data []byte) error {
	var w wire.DeadJob
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*d = newDeadJob(w)
	return nil
}

func newDeadJob(w wire.DeadJob) DeadJob {
	return DeadJob{ID: w.ID, Topic: w.Topic, Body: w.Body, Attempts: w.Attempts, Reason: w.Reason,
		DeadAt: wire.TimeOf(w.DeadAt, w.DeadAtMS), CreatedAt: wire.TimeOf(w.CreatedAt, w.CreatedAtMS)}
}

// DeadPage is one page of a topic's dead letters, newest first.
type DeadPage struct {
	Total int // dead letters of the topic, all pages
	Jobs  []DeadJob
}

// MarshalJSON writes the page as /dead/list answers it.
func (p DeadPage) MarshalJSON() ([]byte, error) {
	w := wire.DeadPage{Total: p.Total}
	if p.Jobs != nil {
		w.Jobs = make([]wire.DeadJob, len(p.Jobs))
		for i, d := range p.Jobs {
			w.Jobs[i] = d.wireForm()
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the page as /dead/list answers it.
func (p *DeadPage) UnmarshalJSON(data []byte) error {
	var w wire.DeadPage
	if err := json.Unmarshal(data, &w); err != nil {
		return err
	}
	*p = DeadPage{Total: w.Total}
	if w.Jobs != nil {
		p.Jobs = make([]DeadJob, len(w.Jobs))
		for i, d := range w.Jobs {
			p.Jobs[i] = newDeadJob(d)
		}
	}
	return nil
}

// secondsUp converts d to whole seconds, rounding a positive fraction up.
func secondsUp(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d > 0 && d%time.Second != 0 {
		s++
	}
	return s
}

// millisUp converts d to whole milliseconds, rounding a positive fraction up.
func millisUp(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d > 0 && d%time.Millisecond != 0 {
		ms++
	}
	return ms
}
