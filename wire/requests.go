package wire

// PushJob is the body of /push for one job, and an element of "jobs" in a
// batch (PushBatch). Exactly one of Delay and DelayMS is usually given;
// DelayMS wins when both are.
type PushJob struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
	// Delay is the wait before the job is ready, in seconds.
	Delay *int64 `json:"delay,omitempty"`
	// DelayMS is the wait in milliseconds.
	DelayMS *int64 `json:"delay_ms,omitempty"`
	// TTR is how long one delivery may last, in seconds (1 to 86400). A
	// job with a callback may leave it out.
	TTR  *int64 `json:"ttr,omitempty"`
	Body string `json:"body"`
	// Retry is the schedule of waits before each redelivery, in seconds.
	Retry []int64 `json:"retry,omitempty"`
	// MaxAttempts limits deliveries: 0 is unlimited without a schedule,
	// len(Retry)+1 with one.
	MaxAttempts int  `json:"max_attempts,omitempty"`
	IfAbsent    bool `json:"if_absent,omitempty"`
	// Callback makes the server deliver the job by calling a URL instead
	// of handing it to /pop.
	Callback *Callback `json:"callback,omitempty"`
}

// Callback is where and how the server delivers a webhook job, in /push and
// in /get.
type Callback struct {
	URL     string            `json:"url"`
	Method  string            `json:"method,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// TimeoutSeconds bounds one call.
	TimeoutSeconds  int  `json:"timeout,omitempty"`
	FollowRedirects bool `json:"follow_redirects,omitempty"`
}

// PushBatch is the body of /push for 1 to 1000 jobs, stored all or nothing
// when they are valid.
type PushBatch struct {
	Jobs []PushJob `json:"jobs"`
}

// PopRequest is the body of /pop. Topic lists one or more topics separated
// by commas, the first listed winning when several have jobs. Timeout is
// the hold in seconds, at most the server's queue_block_timeout (its
// default). Count, when given, asks for up to that many jobs and makes the
// answer an array.
type PopRequest struct {
	Topic   string `json:"topic"`
	Timeout int64  `json:"timeout"`
	Count   int    `json:"count,omitempty"`
}

// IDRequest is the body of /get, and of /finish and /delete for one job.
type IDRequest struct {
	ID string `json:"id"`
}

// IDsRequest is the body of /finish and /delete for 1 to 1000 jobs.
type IDsRequest struct {
	IDs []string `json:"ids"`
}

// FinishRequest is the body of /finish for one delivery: Attempt (the
// attempts /pop gave) makes the server refuse the finish if the job has
// been delivered again since; 0 leaves it unchecked.
type FinishRequest struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt,omitempty"`
}

// ReleaseRequest is the body of /release. Delay, in seconds, replaces the
// wait the retry schedule would give; Attempt is the delivery's receipt, as
// for FinishRequest.
type ReleaseRequest struct {
	ID      string `json:"id"`
	Delay   *int64 `json:"delay,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
}

// TouchRequest is the body of /touch, with the delivery's receipt as for
// FinishRequest.
type TouchRequest struct {
	ID      string `json:"id"`
	Attempt int    `json:"attempt,omitempty"`
}

// StatsRequest is the body of /stats: one topic, or all when Topic is
// empty (an empty body does too).
type StatsRequest struct {
	Topic string `json:"topic,omitempty"`
}

// TopicsRequest is the body of /topics, which takes no parameters (an
// empty body does too).
type TopicsRequest struct{}

// UpcomingRequest is the body of /upcoming: how many one-minute slots to
// count (1 to 1440; 60 when left out).
type UpcomingRequest struct {
	Minutes int `json:"minutes,omitempty"`
}

// DeadListRequest is the body of /dead/list: a page of a topic's dead
// letters, newest first. Limit 0 is the server's default (50).
type DeadListRequest struct {
	Topic  string `json:"topic"`
	Offset int    `json:"offset,omitempty"`
	Limit  int    `json:"limit,omitempty"`
}

// DeadKickRequest is the body of /dead/kick for one dead letter.
type DeadKickRequest struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
}

// DeadKickOldestRequest is the body of /dead/kick for the Count (1 to
// 1000) oldest dead letters of a topic.
type DeadKickOldestRequest struct {
	Topic string `json:"topic"`
	Count int    `json:"count"`
}

// DeadDeleteRequest is the body of /dead/delete for one dead letter.
type DeadDeleteRequest struct {
	Topic string `json:"topic"`
	ID    string `json:"id"`
}

// DeadDeleteAllRequest is the body of /dead/delete for every dead letter
// of a topic; All must be true.
type DeadDeleteAllRequest struct {
	Topic string `json:"topic"`
	All   bool   `json:"all"`
}
