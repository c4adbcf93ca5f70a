package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/wire"
)

// Push adds a job, or replaces the job with the same id (rescheduling it,
// whatever its state). With job.IfAbsent, an existing job is left alone
// and existed reports it; without, existed is always false.
func (c *Client) Push(ctx context.Context, job PushJob) (existed bool, err error) {
	var data *wire.IfAbsentResult
	if err := c.Call(ctx, "/push", job.wireForm(), &data); err != nil {
		return false, err
	}
	return data != nil && data.Exists, nil
}

// PushBatch pushes 1 to 1000 jobs in one request. The batch is checked
// whole first: when any job is invalid nothing is stored, and
// InvalidJobs(err) lists the bad ones. When it is stored only in part (some
// partitions' Redis unavailable), the error is a *PartialBatchError, and
// the results still list every job, the ones not stored with BatchFailed;
// pushing the whole batch again is safe. The results are in input order.
func (c *Client) PushBatch(ctx context.Context, jobs []PushJob) ([]PushResult, error) {
	batch := wire.PushBatch{Jobs: make([]wire.PushJob, len(jobs))}
	for i, job := range jobs {
		batch.Jobs[i] = job.wireForm()
	}
	var results []PushResult
	err := asPartialBatch(c.Call(ctx, "/push", batch, &results))
	var partial *PartialBatchError
	if errors.As(err, &partial) {
		results = make([]PushResult, len(partial.Results))
		for i, r := range partial.Results {
			results[i] = PushResult{ID: r.ID, Status: r.Status}
		}
	}
	return results, err
}

// newPopRequest joins the topics and turns hold into whole seconds,
// rounded up so that a short hold still waits.
func newPopRequest(topics []string, hold time.Duration, count int) (wire.PopRequest, error) {
	if len(topics) == 0 {
		return wire.PopRequest{}, errors.New("/pop: no topic given")
	}
	if hold < 0 {
		hold = 0
	}
	return wire.PopRequest{Topic: strings.Join(topics, ","), Timeout: secondsUp(hold), Count: count}, nil
}

// popTimeout is how long a pop holding for hold may take in all: the hold
// plus the ordinary request timeout, so the server always answers first.
func (c *Client) popTimeout(path string, timeoutSeconds int64) (time.Duration, error) {
	hold := time.Duration(timeoutSeconds) * time.Second
	total := hold + c.requestTimeout
	if c.http.Timeout > 0 && c.http.Timeout <= hold {
		return 0, fmt.Errorf("%s: the http.Client's Timeout (%v) would cut a hold of %v: leave it at zero", path, c.http.Timeout, hold)
	}
	return total, nil
}

// Pop waits up to hold (whole seconds, rounded up; at most the server's
// queue_block_timeout) for a job of one of topics, the first listed topic
// winning when several have one. It returns (nil, nil) when the hold ends
// with no job. The job is reserved for its TTR.
func (c *Client) Pop(ctx context.Context, topics []string, hold time.Duration) (*Job, error) {
	req, err := newPopRequest(topics, hold, 0)
	if err != nil {
		return nil, err
	}
	timeout, err := c.popTimeout("/pop", req.Timeout)
	if err != nil {
		return nil, err
	}
	var delivery *wire.Delivery
	if err := c.call(ctx, "/pop", req, &delivery, timeout); err != nil {
		return nil, err
	}
	if delivery == nil {
		return nil, nil
	}
	job := jobOf(*delivery)
	return &job, nil
}

// PopN waits up to hold for at least one job of the topics, then returns
// up to count (1 to 100) that could be claimed at once. An empty slice means
// the hold ended with no job.
func (c *Client) PopN(ctx context.Context, topics []string, count int, hold time.Duration) ([]Job, error) {
	if count < 1 {
		return nil, fmt.Errorf("/pop: count must be at least 1, got %d", count)
	}
	req, err := newPopRequest(topics, hold, count)
	if err != nil {
		return nil, err
	}
	timeout, err := c.popTimeout("/pop", req.Timeout)
	if err != nil {
		return nil, err
	}
	deliveries := []wire.Delivery{}
	if err := c.call(ctx, "/pop", req, &deliveries, timeout); err != nil {
		return nil, err
	}
	if deliveries == nil {
		return nil, nil // the server answered null
	}
	jobs := make([]Job, len(deliveries))
	for i, d := range deliveries {
		jobs[i] = jobOf(d)
	}
	return jobs, nil
}

// Finish marks a delivered job done for good. An unknown id is not an
// error; a dead-lettered job is (APIError "job is dead-lettered").
func (c *Client) Finish(ctx context.Context, id string) error {
	return c.Call(ctx, "/finish", wire.IDRequest{ID: id}, nil)
}

// FinishDelivery finishes a job only while attempt (the delivery's
// Job.Attempts, its receipt) is the delivery that holds it. The server
// refuses a job delivered again since, no longer reserved (the lease ran
// out, or it was released) or dead-lettered, and leaves it alone: the
// error is an *APIError for which IsLeaseLost is true. An unknown id is
// not an error, as for Finish; attempt 0 is Finish.
func (c *Client) FinishDelivery(ctx context.Context, id string, attempt int) error {
	return c.Call(ctx, "/finish", wire.FinishRequest{ID: id, Attempt: attempt}, nil)
}

// FinishIDs finishes 1 to 1000 jobs. When some are dead-lettered, it
// returns both the result (the others are finished) and an *APIError.
// When some ids could not be handled (part of Redis unavailable), the
// error is a *PartialBatchError listing every id's status, and the result
// counts what was done; finishing the same ids again is safe.
func (c *Client) FinishIDs(ctx context.Context, ids []string) (FinishResult, error) {
	var result FinishResult
	err := asPartialBatch(c.Call(ctx, "/finish", wire.IDsRequest{IDs: ids}, &result))
	var partial *PartialBatchError
	var apiErr *APIError
	switch {
	case errors.As(err, &partial):
		for _, r := range partial.Results {
			switch r.Status {
			case BatchFinished:
				result.Finished++
			case StateDead:
				result.Dead = append(result.Dead, r.ID)
			}
		}
	case errors.As(err, &apiErr) && len(apiErr.Data) > 0:
		// A partial refusal still reports what was done.
		_ = json.Unmarshal(apiErr.Data, &result)
	}
	return result, err
}

// Delete removes a job in any state. An unknown id is not an error.
func (c *Client) Delete(ctx context.Context, id string) error {
	return c.Call(ctx, "/delete", wire.IDRequest{ID: id}, nil)
}

// DeleteIDs removes 1 to 1000 jobs and returns how many existed. When some
// ids could not be handled (part of Redis unavailable), the error is a
// *PartialBatchError listing every id's status, and the count is of the
// jobs deleted; deleting the same ids again is safe.
func (c *Client) DeleteIDs(ctx context.Context, ids []string) (int, error) {
	var data wire.DeleteResult
	err := asPartialBatch(c.Call(ctx, "/delete", wire.IDsRequest{IDs: ids}, &data))
	var partial *PartialBatchError
	if errors.As(err, &partial) {
		for _, r := range partial.Results {
			if r.Status == BatchDeleted {
				data.Deleted++
			}
		}
	}
	return data.Deleted, err
}

// Get returns a job's stored view, or (nil, nil) for an unknown id.
func (c *Client) Get(ctx context.Context, id string) (*JobInfo, error) {
	var info *JobInfo
	if err := c.Call(ctx, "/get", wire.IDRequest{ID: id}, &info); err != nil {
		return nil, err
	}
	return info, nil
}

// Release gives a reserved job back: this delivery ends as failed, and the
// job is due again after its retry schedule's next wait (or opts.Delay), or
// dead-lettered when its attempts ran out.
func (c *Client) Release(ctx context.Context, id string, opts ReleaseOptions) (ReleaseResult, error) {
	req := wire.ReleaseRequest{ID: id, Attempt: opts.Attempt}
	if opts.Delay != nil {
		req.Delay = new(secondsUp(max(*opts.Delay, 0)))
	}
	var result ReleaseResult
	err := c.Call(ctx, "/release", req, &result)
	return result, err
}

// Touch extends a reserved job's lease to now + its ttr and returns the
// new end of the lease. attempt is the delivery's receipt (0 to leave it
// out): the server refuses a touch of a later delivery.
func (c *Client) Touch(ctx context.Context, id string, attempt int) (time.Time, error) {
	var data wire.TouchResult
	if err := c.Call(ctx, "/touch", wire.TouchRequest{ID: id, Attempt: attempt}, &data); err != nil {
		return time.Time{}, err
	}
	return wire.TimeOf(data.LeaseUntil, data.LeaseUntilMS), nil
}

// Stats counts jobs per state for topic, or for every topic when topic is "".
func (c *Client) Stats(ctx context.Context, topic string) (map[string]TopicStats, error) {
	stats := map[string]TopicStats{}
	if err := c.Call(ctx, "/stats", wire.StatsRequest{Topic: topic}, &stats); err != nil {
		return nil, err
	}
	return stats, nil
}

// Topics lists the topics that have jobs, sorted.
func (c *Client) Topics(ctx context.Context) ([]string, error) {
	topics := []string{}
	if err := c.Call(ctx, "/topics", wire.TopicsRequest{}, &topics); err != nil {
		return nil, err
	}
	return topics, nil
}

// DeadList returns a page of topic's dead letters, newest first. limit is
// 1 to 1000 (0 means the server's default, 50).
func (c *Client) DeadList(ctx context.Context, topic string, offset, limit int) (DeadPage, error) {
	var page DeadPage
	err := c.Call(ctx, "/dead/list", wire.DeadListRequest{Topic: topic, Offset: offset, Limit: limit}, &page)
	if page.Jobs == nil {
		page.Jobs = []DeadJob{}
	}
	return page, err
}

// DeadKick moves one dead-lettered job of topic back to ready, with its
// attempts reset, and returns the ids kicked (none when id is not there).
func (c *Client) DeadKick(ctx context.Context, topic, id string) ([]string, error) {
	return c.deadKick(ctx, wire.DeadKickRequest{Topic: topic, ID: id})
}

// DeadKickOldest moves the count (1 to 1000) oldest dead letters of topic
// back to ready and returns their ids.
func (c *Client) DeadKickOldest(ctx context.Context, topic string, count int) ([]string, error) {
	return c.deadKick(ctx, wire.DeadKickOldestRequest{Topic: topic, Count: count})
}

func (c *Client) deadKick(ctx context.Context, req any) ([]string, error) {
	var data wire.KickResult
	err := c.Call(ctx, "/dead/kick", req, &data)
	if data.Kicked == nil {
		data.Kicked = []string{}
	}
	return data.Kicked, err
}

// DeadDelete removes one dead letter of topic and returns how many were
// removed (0 or 1).
func (c *Client) DeadDelete(ctx context.Context, topic, id string) (int, error) {
	return c.deadDelete(ctx, wire.DeadDeleteRequest{Topic: topic, ID: id})
}

// DeadDeleteAll removes every dead letter of topic and returns how many.
func (c *Client) DeadDeleteAll(ctx context.Context, topic string) (int, error) {
	return c.deadDelete(ctx, wire.DeadDeleteAllRequest{Topic: topic, All: true})
}

func (c *Client) deadDelete(ctx context.Context, req any) (int, error) {
	var data wire.DeleteResult
	err := c.Call(ctx, "/dead/delete", req, &data)
	return data.Deleted, err
}
