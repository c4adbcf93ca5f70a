package delayqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// MaxIDsPerCall bounds the ids of one Finish or Delete call.
const MaxIDsPerCall = 1000

// Finish removes a job for good: no more deliveries. An unknown id is not
// an error; a dead-lettered job gives ErrDead.
func (q *Queue) Finish(ctx context.Context, id string) error {
	statuses, err := q.FinishBatch(ctx, []string{id})
	if err != nil {
		return err
	}
	if statuses[0] == RemoveDead {
		return fmt.Errorf("finish %s: %w", id, ErrDead)
	}
	return nil
}

// FinishDelivery finishes a job only while attempt is its current
// delivery, still reserved: attempt is that delivery's receipt (Delivery.
// Attempts), as Release and Touch take it. A job delivered again since
// gives ErrStaleDelivery, one no longer reserved (its lease ran out, or it
// was released) ErrNotReserved, a dead-lettered one ErrDead; each is left
// alone, and state says what it is. An unknown id is not an error, as for
// Finish; attempt 0 is Finish.
func (q *Queue) FinishDelivery(ctx context.Context, id string, attempt int) (state string, err error) {
	return q.finishDelivery(ctx, id, attempt, 0)
}

// finishDelivery is FinishDelivery with, when createdMS is not 0, the job's
// creation time as part of the receipt (see CallbackDelivery).
func (q *Queue) finishDelivery(ctx context.Context, id string, attempt int, createdMS int64) (state string, err error) {
	switch {
	case attempt == 0:
		return "", q.Finish(ctx, id)
	case attempt < 0:
		return "", fmt.Errorf("finish: %w: attempt must be positive", ErrInvalidJob)
	case id == "":
		return "", fmt.Errorf("finish: %w: id is empty", ErrInvalidJob)
	}
	if err := q.started(ctx); err != nil {
		return "", fmt.Errorf("finish %s: %w", id, err)
	}
	// finish.lua's form for one delivery: an empty first id, then the id,
	// the attempt and the creation time ("": not checked). It is not
	// coalesced with other finishes.
	reply, err := redis.Values(q.callAck(ctx, q.partitionOf(id), q.scripts.finish, nil, "", id, attempt, createdArg(createdMS)))
	if err != nil {
		return "", fmt.Errorf("finish %s: %w", id, err)
	}
	if len(reply) != 3 {
		return "", fmt.Errorf("finish %s: reply of %d values", id, len(reply))
	}
	status, err1 := redis.Int(reply[0], nil)
	state, err2 := redis.String(reply[1], nil)
	if err := errors.Join(err1, err2); err != nil {
		return "", fmt.Errorf("finish %s: reply: %w", id, err)
	}
	switch status {
	case 0:
		return "", nil
	case 1:
		topic, err := redis.String(reply[2], nil)
		if err != nil {
			return "", fmt.Errorf("finish %s: reply: %w", id, err)
		}
		q.obs.JobsFinished(topic, 1)
		return state, nil
	}
	return state, heldRefusal("finish", id, status, state)
}

// createdArg is a job's creation time in ms as a script's argument, or ""
// (not checked) for 0.
func createdArg(ms int64) string {
	if ms == 0 {
		return ""
	}
	return strconv.FormatInt(ms, 10)
}

// RemoveStatus says what a finish or delete did to one id.
type RemoveStatus int

// Removal outcomes.
const (
	RemoveUnknown RemoveStatus = iota // no such job (finished or deleted already)
	Removed                           // finished or deleted
	RemoveDead                        // finish only: the job is dead-lettered and was left alone
	RemoveFailed                      // not handled: its partition could not be reached (see ErrPartial)
)

// FinishBatch finishes every id it can and returns each id's outcome. A
// dead-lettered job is left alone (RemoveDead). Ids of several partitions
// make one call each: when some fail, the error wraps ErrPartial and the
// outcomes say which ids were handled.
func (q *Queue) FinishBatch(ctx context.Context, ids []string) ([]RemoveStatus, error) {
	return q.removeJobs(ctx, "finish", q.finishOn, ids, q.obs.JobsFinished)
}

// Delete removes a job in any state, dead letters included. An unknown id
// is not an error.
func (q *Queue) Delete(ctx context.Context, id string) error {
	_, err := q.removeJobs(ctx, "delete", deleteOn, []string{id}, q.obs.JobsDeleted)
	return err
}

// DeleteBatch deletes ids and returns each id's outcome, as FinishBatch.
func (q *Queue) DeleteBatch(ctx context.Context, ids []string) ([]RemoveStatus, error) {
	return q.removeJobs(ctx, "delete", deleteOn, ids, q.obs.JobsDeleted)
}

// removeJobs removes ids with remove (finishOn or deleteOn), once per
// partition holding some of them, and returns each id's status; observe
// counts the jobs removed per topic. Ids of several partitions make one
// call each, at once; when some fail, the error wraps ErrPartial and the
// others' ids were removed (removing again is harmless).
func (q *Queue) removeJobs(ctx context.Context, op string, remove func(context.Context, *partition, []any) ([]removal, error), ids []string, observe func(string, int)) ([]RemoveStatus, error) {
	if len(ids) == 0 || len(ids) > MaxIDsPerCall {
		return nil, fmt.Errorf("%s: %w: 1 to %d ids are needed", op, ErrInvalidJob, MaxIDsPerCall)
	}
	for _, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("%s: %w: id is empty", op, ErrInvalidJob)
		}
	}
	if err := q.started(ctx); err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, ids[0], err)
	}
	statuses := make([]RemoveStatus, len(ids))
	failed, firstErr := q.inPartitions(len(ids), func(i int) string { return ids[i] },
		func(p *partition, idx []int) error {
			args := make([]any, len(idx))
			for j, i := range idx {
				args[j] = ids[i]
			}
			reply, err := remove(ctx, p, args)
			if err != nil {
				return err
			}
			q.noteRemoved(reply, statuses, idx, observe)
			return nil
		},
		func(idx []int, _ error) {
			for _, i := range idx {
				statuses[i] = RemoveFailed
			}
		})
	switch {
	case failed == len(ids):
		return nil, fmt.Errorf("%s %s: %w", op, ids[0], firstErr)
	case failed > 0:
		return statuses, fmt.Errorf("%s: %w: %d of %d ids not handled: %w", op, ErrPartial, failed, len(ids), firstErr)
	}
	return statuses, nil
}

// noteRemoved copies a partition's removal statuses to their places in
// statuses, and counts the removed jobs.
func (q *Queue) noteRemoved(reply []removal, statuses []RemoveStatus, idx []int, observe func(string, int)) {
	for j, r := range reply {
		switch r.status {
		case 1:
			statuses[idx[j]] = Removed
			observe(r.topic, 1)
		case -1:
			statuses[idx[j]] = RemoveDead
		default:
			statuses[idx[j]] = RemoveUnknown
		}
	}
}

// Release gives a reserved job back: that delivery ends as failed now, and
// the job follows its retry schedule (delay, when not nil, replaces the
// schedule's next wait) or goes to the dead letters when its attempts are
// used up. attempt, when not 0, must be the job's current delivery. It
// returns the job's new state and due time.
func (q *Queue) Release(ctx context.Context, id string, delay *time.Duration, attempt int) (string, time.Time, error) {
	override := int64(-1)
	if delay != nil {
		if *delay < 0 || *delay > MaxDelay {
			return "", time.Time{}, fmt.Errorf("release: %w: delay must be between 0 and %d seconds", ErrInvalidJob, int64(MaxDelay/time.Second))
		}
		override = delay.Milliseconds()
	}
	return q.leaseChange(ctx, "release", q.scripts.release, id, override, attempt, ReasonReleased)
}

// Touch extends a reserved job's lease to now + ttr and returns the job's
// state (the one found, when refused) and the lease's new end.
func (q *Queue) Touch(ctx context.Context, id string, attempt int) (string, time.Time, error) {
	return q.leaseChange(ctx, "touch", q.scripts.touch, id, attempt)
}

func (q *Queue) leaseChange(ctx context.Context, op string, script *script, id string, args ...any) (string, time.Time, error) {
	if id == "" {
		return "", time.Time{}, fmt.Errorf("%s: %w: id is empty", op, ErrInvalidJob)
	}
	if err := q.started(ctx); err != nil {
		return "", time.Time{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	p := q.partitionOf(id)
	reply, err := redis.Values(q.callAck(ctx, p, script, nil, append([]any{id}, args...)...))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	if len(reply) < 3 {
		return "", time.Time{}, fmt.Errorf("%s %s: short reply", op, id)
	}
	status, err1 := redis.Int(reply[0], nil)
	state, err2 := redis.String(reply[1], nil)
	at, err3 := redis.Int64(reply[2], nil)
	if err := errors.Join(err1, err2, err3); err != nil {
		return "", time.Time{}, fmt.Errorf("%s %s: reply: %w", op, id, err)
	}
	if status != 1 {
		return state, time.Time{}, heldRefusal(op, id, status, state)
	}
	if len(reply) > 4 {
		// release.lua: the topic, then the topics it made ready to signal.
		topic, _ := redis.String(reply[3], nil)
		if state == StateDead {
			q.obs.JobsDeadLettered(topic, 1)
		}
		if _, err := q.signalTopics(ctx, p, reply[4:]); err != nil {
			// The change is made; held pops find the job at their next
			// round instead of at once.
			q.log.Warn("could not wake held pops for a released job", "job_id", id, "err", err)
		}
	}
	return state, time.UnixMilli(at), nil
}

// heldRefusal is the error of a refusal by held_delivery (lib.lua, section held):
// status 0 unknown id, -1 not reserved (state says what it is), -2 stale
// delivery; or by release.lua: -3 a consumer's release of a webhook job.
func heldRefusal(op, id string, status int, state string) error {
	switch {
	case status == 0:
		return fmt.Errorf("%s %s: %w", op, id, ErrNotFound)
	case status == -1 && state == StateDead:
		return fmt.Errorf("%s %s: %w", op, id, ErrDead)
	case status == -1:
		return fmt.Errorf("%s %s: %w (it is %s)", op, id, ErrNotReserved, state)
	case status == -2:
		return fmt.Errorf("%s %s: %w", op, id, ErrStaleDelivery)
	case status == -3:
		return fmt.Errorf("%s %s: %w", op, id, ErrWebhookJob)
	}
	return fmt.Errorf("%s %s: unexpected status %d", op, id, status)
}

// Get returns the stored view of a job, or nil when there is no such job.
func (q *Queue) Get(ctx context.Context, id string) (*JobInfo, error) {
	if err := q.started(ctx); err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	infos, err := q.getJobs(ctx, q.partitionOf(id), []string{id})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	return infos[0], nil
}

// getJobs reads jobs of partition p (get.lua); a missing one is nil.
func (q *Queue) getJobs(ctx context.Context, p *partition, ids []string) ([]*JobInfo, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	reply, err := redis.Values(q.call(ctx, p, q.scripts.get, nil, args...))
	if err != nil {
		return nil, err
	}
	if len(reply) != len(ids) {
		return nil, fmt.Errorf("get.lua: %d views for %d ids", len(reply), len(ids))
	}
	infos := make([]*JobInfo, len(ids))
	for i, v := range reply {
		fields, err := redis.Strings(v, nil)
		if err != nil {
			return nil, fmt.Errorf("get.lua: %w", err)
		}
		if len(fields) > 0 {
			if infos[i], err = jobInfoFromView(fields); err != nil {
				return nil, err
			}
		}
	}
	return infos, nil
}

// jobView is the order of a job's fields in the scripts' views (view in
// scripts/lib.lua).
const (
	viewID = iota
	viewTopic
	viewState
	viewAttempts
	viewDue
	viewPosition
	viewTTR
	viewCreated
	viewMaxAttempts
	viewRetry
	viewCallback
	viewDeadReason
	viewDeadAt
	viewLastStatus
	viewLastError
	viewLastResponse
	viewBody
	viewFields
)

func jobInfoFromView(f []string) (*JobInfo, error) {
	if len(f) != viewFields {
		return nil, fmt.Errorf("job view of %d fields, want %d", len(f), viewFields)
	}
	info := &JobInfo{
		ID:          f[viewID],
		Topic:       f[viewTopic],
		State:       f[viewState],
		TTR:         time.Duration(atoi(f[viewTTR])) * time.Second,
		Attempts:    int(atoi(f[viewAttempts])),
		DueAt:       time.UnixMilli(atoi(f[viewDue])),
		CreatedAt:   time.UnixMilli(atoi(f[viewCreated])),
		Body:        f[viewBody],
		MaxAttempts: int(atoi(f[viewMaxAttempts])),
		DeadReason:  f[viewDeadReason],
	}
	switch info.State {
	case StateReserved:
		info.LeaseUntil = time.UnixMilli(atoi(f[viewPosition]))
	case StateDead:
		info.DeadAt = time.UnixMilli(atoi(f[viewDeadAt]))
	}
	if cb := f[viewCallback]; cb != "" {
		var c Callback
		if json.Unmarshal([]byte(cb), &c) == nil {
			info.Callback = &c
		}
		info.LastStatus = int(atoi(f[viewLastStatus]))
		info.LastError = f[viewLastError]
		info.LastResponse = f[viewLastResponse]
	}
	if rt := f[viewRetry]; rt != "" {
		for _, p := range strings.Split(rt, ",") {
			info.Retry = append(info.Retry, int(atoi(p)))
		}
	}
	return info, nil
}

func atoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Numbers written by Lua may come back in float notation.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return 0
		}
		return int64(f)
	}
	return n
}

// removal is finish.lua's or delete.lua's outcome for one id.
type removal struct {
	status int64
	topic  string
}

// finishOn finishes ids on partition p, in a script call shared with
// other concurrent callers: with the partition's claims (claim.lua
// finishes the ids it is given before it claims), so that a load of pops
// and finishes makes one script call where it made one of each. With
// Options.WaitReplicas a finish waits for the replicas and a claim must
// not, so finishes have calls of their own then (finish.lua, then WAIT).
//
// Where the scripts are sent with EVALSHA (Redis 6.2, which has no
// functions and so no 'allow-oom' flag for claim.lua), a Redis out of
// memory refuses claim.lua at its first write, before anything is written,
// but lets finish.lua run, since a finish frees memory: the ids are then
// finished by finish.lua.
func (q *Queue) finishOn(ctx context.Context, p *partition, ids []any) ([]removal, error) {
	if q.opts.WaitReplicas > 0 {
		return p.finishes.do(ctx, ids)
	}
	out, err := p.claims.do(ctx, claimBatch{finish: ids})
	if errors.Is(err, ErrRedisFull) {
		return p.finishes.do(ctx, ids)
	}
	return out.removals, err
}

// deleteOn deletes ids on partition p (delete.lua), in a script call
// shared with other concurrent deletes.
func deleteOn(ctx context.Context, p *partition, ids []any) ([]removal, error) {
	return p.deletes.do(ctx, ids)
}

// execRemovals runs the ids of several Finish or Delete calls to partition
// p (each an []any of ids) in one script call.
func (q *Queue) execRemovals(p *partition, script *script) func(context.Context, [][]any) ([][]removal, error) {
	return func(ctx context.Context, calls [][]any) ([][]removal, error) {
		n := 0
		for _, c := range calls {
			n += len(c)
		}
		args := make([]any, 0, n)
		for _, c := range calls {
			args = append(args, c...)
		}
		reply, err := redis.Values(q.callAck(ctx, p, script, nil, args...))
		if err != nil {
			return nil, err
		}
		if len(reply) != 2*n {
			return nil, fmt.Errorf("reply of %d values for %d ids", len(reply), n)
		}
		// One array for every removal of the batch.
		all, err := parseRemovals(reply, n)
		if err != nil {
			return nil, err
		}
		out := make([][]removal, len(calls))
		for i, c := range calls {
			out[i] = all[:len(c):len(c)]
			all = all[len(c):]
		}
		return out, nil
	}
}

// parseRemovals reads n removals (a status and a topic each) from the
// head of reply.
func parseRemovals(reply []any, n int) ([]removal, error) {
	out := make([]removal, n)
	for j := range out {
		status, ok1 := reply[2*j].(int64)
		topic, ok2 := reply[2*j+1].([]byte)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("reply: unexpected value types %T %T", reply[2*j], reply[2*j+1])
		}
		out[j] = removal{status: status, topic: string(topic)}
	}
	return out, nil
}
