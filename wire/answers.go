package wire

// The data of each answer, by endpoint. An endpoint whose answer has no
// data (a single /push without if_absent, /finish and /delete of one id,
// /get of an unknown id, /pop with nothing ready and no count, the probes)
// sends null.

// IfAbsentResult is the data of a single /push with if_absent: whether a
// job with the id existed, in which case nothing changed.
type IfAbsentResult struct {
	Exists bool `json:"exists"`
}

// PushResult is one job of the data of a batch /push, in batch order.
// Status is StatusCreated, StatusReplaced or StatusExists.
type PushResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

// InvalidJob is one bad job of a rejected batch /push (code 1): nothing of
// the batch was stored.
type InvalidJob struct {
	Index   int    `json:"index"` // position in the batch, from 0
	ID      string `json:"id"`    // "" when the job has no valid id
	Message string `json:"message"`
}

// BatchResult is one job's or id's outcome in the data of a batch done in
// part (code 1): a batch /push, or /finish or /delete with ids, of which
// some partitions could not be reached. Every job or id is listed, in batch
// order (for ids: the distinct ids in the order first given).
type BatchResult struct {
	Index int    `json:"index"`
	ID    string `json:"id"`
	// Status is StatusCreated, StatusReplaced or StatusExists for a push;
	// StatusFinished, StatusDeleted, StatusUnknown or StateDead for /finish
	// and /delete; StatusFailed when the job or id was not handled.
	Status string `json:"status"`
	// Message says why, for StatusFailed.
	Message string `json:"message,omitempty"`
}

// Delivery is a job handed out by /pop: the data of a /pop (null when the
// hold ended empty), or an element of it with count ([] when empty). TTR is
// in seconds; Attempts counts deliveries, this one included, and is the
// delivery's receipt for /finish, /release and /touch.
type Delivery struct {
	ID       string `json:"id"`
	Body     string `json:"body"`
	Topic    string `json:"topic"`
	TTR      int64  `json:"ttr"`
	Attempts int    `json:"attempts"`
}

// FinishResult is the data of /finish with ids. Finished counts the jobs
// finished now (an id with no job, finished or deleted already, is not
// counted, as in DeleteResult); Dead lists the ids refused because they are
// dead-lettered ([] when none; with some, the answer has code 1).
type FinishResult struct {
	Finished int      `json:"finished"`
	Dead     []string `json:"dead"`
}

// DeleteResult is the data of /delete with ids and of /dead/delete: how
// many jobs existed and were deleted.
type DeleteResult struct {
	Deleted int `json:"deleted"`
}

// JobInfo is the data of /get: a job's stored view. The first five fields
// are the original server's, with Delay the due time in unix seconds; the
// rest are this server's.
type JobInfo struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	Delay int64  `json:"delay"` // due time, unix seconds; 0 when unknown
	TTR   int64  `json:"ttr"`
	Body  string `json:"body"`
	// DelayMS is the due time in unix milliseconds.
	DelayMS     int64  `json:"delay_ms"`
	State       string `json:"state"` // StateDelay, StateReady, StateReserved or StateDead
	Attempts    int    `json:"attempts"`
	CreatedAt   int64  `json:"created_at"` // 0 when unknown (a job imported from the original)
	CreatedAtMS int64  `json:"created_at_ms"`
	MaxAttempts int    `json:"max_attempts"` // as pushed
	Retry       []int  `json:"retry"`        // seconds; [] without a schedule
	// AttemptsLimit is the deliveries the job gets before the dead
	// letters, as the server enforces it: max_attempts when set, else
	// len(retry)+1 with a schedule (a callback job pushed without either
	// has the default backoff's); 0 is unlimited.
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
	Callback     *Callback `json:"callback,omitempty"`
	LastStatus   *int      `json:"last_status,omitempty"`
	LastError    string    `json:"last_error,omitempty"`
	LastResponse string    `json:"last_response,omitempty"`
}

// ReleaseResult is the data of /release: the job's new state (StateDelay,
// StateReady, or StateDead when its attempts ran out) and when it is due
// again (for a dead job, when it was dead-lettered).
type ReleaseResult struct {
	State string `json:"state"`
	Due   int64  `json:"due"`
	DueMS int64  `json:"due_ms"`
}

// TouchResult is the data of /touch: the new end of the lease.
type TouchResult struct {
	LeaseUntil   int64 `json:"lease_until"`
	LeaseUntilMS int64 `json:"lease_until_ms"`
}

// DeadJob is a dead letter in DeadPage.
type DeadJob struct {
	ID          string `json:"id"`
	Topic       string `json:"topic"`
	Body        string `json:"body"`
	Attempts    int    `json:"attempts"`
	Reason      string `json:"reason"` // such as "ttr-expired", "released" or "callback-failed"
	DeadAt      int64  `json:"dead_at"`
	DeadAtMS    int64  `json:"dead_at_ms"`
	CreatedAt   int64  `json:"created_at"` // 0 when unknown
	CreatedAtMS int64  `json:"created_at_ms"`
	// For webhook jobs: the last failed call, as in JobInfo.
	LastStatus   *int   `json:"last_status,omitempty"`
	LastError    string `json:"last_error,omitempty"`
	LastResponse string `json:"last_response,omitempty"`
}

// DeadPage is the data of /dead/list: one page of a topic's dead letters,
// newest first ([] past the end), and how many the topic has in all.
type DeadPage struct {
	Total int       `json:"total"`
	Jobs  []DeadJob `json:"jobs"`
}

// KickResult is the data of /dead/kick: the ids sent back to ready ([]
// when none).
type KickResult struct {
	Kicked []string `json:"kicked"`
}

// TopicStats counts a topic's jobs in each state. The data of /stats is a
// map of them by topic ({} when there is none).
type TopicStats struct {
	Delay    int64 `json:"delay"`
	Ready    int64 `json:"ready"`
	Reserved int64 `json:"reserved"`
	Dead     int64 `json:"dead"`
}

// The data of /topics is the topics that hold jobs, sorted: an array of
// strings ([] when none).

// Upcoming is the data of /upcoming: the jobs due in each StepSeconds slot
// from Start (delayed jobs by due time, reserved jobs by the end of their
// lease).
type Upcoming struct {
	Start       int64   `json:"start"`
	StartMS     int64   `json:"start_ms"`
	StepSeconds int     `json:"step_seconds"`
	Counts      []int64 `json:"counts"`
}

// Readiness is the data of a GET /readyz answer that found background
// loops behind (null when none is).
type Readiness struct {
	StaleLoops []StaleLoop `json:"stale_loops"`
}

// StaleLoop is a background loop that has gone without a completed round
// for SecondsBehind, longer than StaleAfterSeconds. The numbers may have a
// fraction.
type StaleLoop struct {
	Loop              string  `json:"loop"`
	SecondsBehind     float64 `json:"seconds_behind"`
	StaleAfterSeconds float64 `json:"stale_after_seconds"`
}
