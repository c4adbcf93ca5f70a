package delayqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/gomodule/redigo/redis"
)

// Limits on retry schedules.
const (
	MaxRetryEntries  = 100
	MaxRetrySeconds  = 1<<31 - 1
	MaxMaxAttempts   = 10000
	MaxPushBatchJobs = 1000
)

// PushStatus says what a push did.
type PushStatus int

// Push outcomes.
const (
	PushCreated  PushStatus = iota // a new job
	PushReplaced                   // replaced the job with the same id
	PushExists                     // IfAbsent, and the id existed: nothing changed
	PushFailed                     // not stored: its partition could not be reached (see ErrPartial)
)

// PushResult is the outcome of one pushed job.
type PushResult struct {
	Status PushStatus
	DueAt  time.Time // the job's first due time (for PushExists: the existing job's)
	// Err says why a job was not stored (PushFailed).
	Err error
}

// ValidateJob checks a job against the engine's limits. Its errors wrap
// ErrInvalidJob and name the field.
func ValidateJob(job Job) error {
	switch {
	case job.Topic == "" || len(job.Topic) > MaxTopicBytes || !utf8.ValidString(job.Topic):
		return fmt.Errorf("%w: topic must be 1 to %d bytes of UTF-8", ErrInvalidJob, MaxTopicBytes)
	case strings.Contains(job.Topic, ","):
		return fmt.Errorf("%w: topic must not contain a comma", ErrInvalidJob)
	case strings.ContainsFunc(job.Topic, unicode.IsControl):
		// /pop refuses such a topic: a job of one could never be popped.
		return fmt.Errorf("%w: topic must not contain control characters", ErrInvalidJob)
	case job.ID == "" || len(job.ID) > MaxIDBytes || !utf8.ValidString(job.ID):
		return fmt.Errorf("%w: id must be 1 to %d bytes of UTF-8", ErrInvalidJob, MaxIDBytes)
	case job.Delay < 0 || job.Delay > MaxDelay:
		return fmt.Errorf("%w: delay must be between 0 and %d seconds", ErrInvalidJob, int64(MaxDelay/time.Second))
	case job.Callback == nil && (job.TTR < time.Second || job.TTR > MaxTTR):
		return fmt.Errorf("%w: ttr must be between 1 and %d seconds", ErrInvalidJob, int64(MaxTTR/time.Second))
	case len(job.Retry) > MaxRetryEntries:
		return fmt.Errorf("%w: retry must have at most %d entries", ErrInvalidJob, MaxRetryEntries)
	case job.MaxAttempts < 0 || job.MaxAttempts > MaxMaxAttempts:
		return fmt.Errorf("%w: max_attempts must be between 0 and %d", ErrInvalidJob, MaxMaxAttempts)
	}
	if job.Callback != nil {
		if err := job.Callback.Validate(); err != nil {
			return err
		}
	}
	for i, r := range job.Retry {
		if r < 0 || r > MaxRetrySeconds {
			return fmt.Errorf("%w: retry[%d] must be between 0 and %d seconds", ErrInvalidJob, i, MaxRetrySeconds)
		}
	}
	return nil
}

// Push stores a job, or replaces the job with the same id in whatever state
// it is: its old schedule, lease and delivery count are dropped. With
// IfAbsent, an existing job is left alone.
func (q *Queue) Push(ctx context.Context, job Job) (PushResult, error) {
	results, err := q.PushBatch(ctx, []Job{job})
	if err != nil {
		return PushResult{}, err
	}
	return results[0], nil
}

// PushBatch pushes jobs. A batch is checked whole first: if one job is
// invalid (or an id repeats), nothing is stored. The jobs of one partition
// are then stored by one atomic script call; a batch spanning partitions
// makes one call per partition, and when some of them fail (Redis gone, a
// crash), the others' jobs are stored: the error then wraps ErrPartial and
// the results say, per job, which were (PushFailed marks the others).
// Pushing the whole batch again is safe: a job replaces its own id, or,
// with IfAbsent, leaves it alone. When no job could be stored, the results
// are nil. Results come in input order.
func (q *Queue) PushBatch(ctx context.Context, jobs []Job) ([]PushResult, error) {
	if len(jobs) == 0 || len(jobs) > MaxPushBatchJobs {
		return nil, fmt.Errorf("push: %w: a batch holds 1 to %d jobs", ErrInvalidJob, MaxPushBatchJobs)
	}
	seen := make(map[string]int, len(jobs))
	for i, job := range jobs {
		if err := ValidateJob(job); err != nil {
			return nil, fmt.Errorf("push: job %d: %w", i, err)
		}
		if j, dup := seen[job.ID]; dup {
			return nil, fmt.Errorf("push: job %d: %w: id %q repeats job %d", i, ErrInvalidJob, job.ID, j)
		}
		seen[job.ID] = i
	}
	if err := q.started(ctx); err != nil {
		return nil, fmt.Errorf("push %s: %w", jobs[0].ID, err)
	}
	results := make([]PushResult, len(jobs))
	failed, firstErr := q.inPartitions(len(jobs), func(i int) string { return jobs[i].ID },
		func(p *partition, idx []int) error {
			call := pushCall{jobs: make([]*Job, len(idx))}
			for j, i := range idx {
				call.jobs[j] = &jobs[i]
			}
			reply, err := p.pushes.do(ctx, call)
			if err != nil {
				return err
			}
			for j, i := range idx {
				results[i] = q.pushed(p, jobs[i], reply.nowMicros, reply.dueAndStatus[2*j], reply.dueAndStatus[2*j+1])
			}
			return nil
		},
		func(idx []int, err error) {
			for _, i := range idx {
				results[i] = PushResult{Status: PushFailed, Err: err}
			}
		})
	switch {
	case failed == len(jobs):
		return nil, fmt.Errorf("push %s: %w", jobs[0].ID, firstErr)
	case failed > 0:
		return results, fmt.Errorf("push: %w: %d of %d jobs not stored: %w", ErrPartial, failed, len(jobs), firstErr)
	}
	return results, nil
}

// pushed reads one job's outcome from its partition's reply, and wakes the
// partition's scanner for a delayed job.
func (q *Queue) pushed(p *partition, job Job, nowMicros, due, status int64) PushResult {
	if status != int64(PushExists) {
		q.obs.JobsPushed(job.Topic, 1)
		// A job pushed with no delay went straight to ready: no scanner
		// needs to run for it (due can still exceed now by the rounding
		// up to whole milliseconds).
		if wait := untilDue(due, nowMicros); job.Delay.Milliseconds() > 0 && wait > 0 {
			p.scanner.wakeBy(time.Now().Add(wait))
		}
	}
	return PushResult{Status: PushStatus(status), DueAt: time.UnixMilli(due)}
}

func retryCSV(retry []int) string {
	parts := make([]string, len(retry))
	for i, r := range retry {
		parts[i] = strconv.Itoa(r)
	}
	return strings.Join(parts, ",")
}

func boolArg(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pushCall is one PushBatch's jobs of one partition.
type pushCall struct {
	jobs []*Job
}

// pushReply is push.lua's reply for one pushCall.
type pushReply struct {
	nowMicros    int64 // Redis' clock when the call ran
	dueAndStatus []int64
}

// execPushes runs the jobs of several PushBatch calls to partition p in
// one push.lua call.
func (q *Queue) execPushes(ctx context.Context, p *partition, calls []pushCall) ([]pushReply, error) {
	total := 0
	for _, c := range calls {
		total += len(c.jobs)
	}
	var topics []string
	seen := make(map[string]bool, 4)
	args := make([]any, 0, 1+pushArgsPerJob*total)
	args = append(args, total)
	for _, c := range calls {
		for _, job := range c.jobs {
			if !seen[job.Topic] {
				seen[job.Topic] = true
				topics = append(topics, job.Topic)
			}
			var err error
			if args, err = appendPushArgs(args, job); err != nil {
				return nil, err
			}
		}
	}
	reply, err := redis.Int64s(q.callAck(ctx, p, q.scripts.push, topics, args...))
	if err != nil {
		return nil, err
	}
	if len(reply) != 1+2*total {
		return nil, fmt.Errorf("push: reply of %d values for %d jobs", len(reply), total)
	}
	out := make([]pushReply, len(calls))
	rest := reply[1:]
	for i, c := range calls {
		out[i] = pushReply{nowMicros: reply[0], dueAndStatus: rest[:2*len(c.jobs)]}
		rest = rest[2*len(c.jobs):]
	}
	return out, nil
}

// pushArgsPerJob is the number of push.lua arguments per job.
const pushArgsPerJob = 9

// appendPushArgs appends push.lua's arguments for one job.
func appendPushArgs(args []any, job *Job) ([]any, error) {
	ttr, retry, callback := job.TTR, job.Retry, ""
	if job.Callback != nil {
		ttr = callbackLease(job.Callback)
		if len(retry) == 0 && job.MaxAttempts == 0 {
			retry = DefaultCallbackRetry
		}
		b, err := json.Marshal(job.Callback)
		if err != nil {
			return nil, fmt.Errorf("push %s: callback: %w", job.ID, err)
		}
		callback = string(b)
	}
	return append(args, job.ID, job.Topic, job.Delay.Milliseconds(), int64(ttr/time.Second), job.Body,
		retryCSV(retry), job.MaxAttempts, boolArg(job.IfAbsent), callback), nil
}
