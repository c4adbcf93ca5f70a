package delayqueue

import (
	"context"
	"encoding/json"
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
	dead, err := q.FinishBatch(ctx, []string{id})
	if err != nil {
		return err
	}
	if len(dead) > 0 {
		return fmt.Errorf("finish %s: %w", id, ErrDead)
	}
	return nil
}

// FinishBatch finishes every id it can and returns the ids it left alone
// because they are dead-lettered.
func (q *Queue) FinishBatch(ctx context.Context, ids []string) (dead []string, err error) {
	statuses, err := q.removeJobs(ctx, "finish", q.finishes, ids, q.obs.JobsFinished)
	if err != nil {
		return nil, err
	}
	for i, s := range statuses {
		if s < 0 {
			dead = append(dead, ids[i])
		}
	}
	return dead, nil
}

// Delete removes a job in any state, dead letters included. An unknown id
// is not an error.
func (q *Queue) Delete(ctx context.Context, id string) error {
	_, err := q.removeJobs(ctx, "delete", q.deletes, []string{id}, q.obs.JobsDeleted)
	return err
}

// DeleteBatch deletes ids and returns how many existed.
func (q *Queue) DeleteBatch(ctx context.Context, ids []string) (int, error) {
	statuses, err := q.removeJobs(ctx, "delete", q.deletes, ids, q.obs.JobsDeleted)
	n := 0
	for _, s := range statuses {
		n += int(s)
	}
	return n, err
}

// removeJobs runs finish.lua or delete.lua (through its coalescer) on ids
// and returns each id's status; observe counts the jobs removed per topic.
func (q *Queue) removeJobs(ctx context.Context, op string, remover *lanes[[]any, []removal], ids []string, observe func(string, int)) ([]int64, error) {
	if len(ids) == 0 || len(ids) > MaxIDsPerCall {
		return nil, fmt.Errorf("%s: %w: 1 to %d ids are needed", op, ErrInvalidJob, MaxIDsPerCall)
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		if id == "" {
			return nil, fmt.Errorf("%s: %w: id is empty", op, ErrInvalidJob)
		}
		args[i] = id
	}
	reply, err := remover.do(ctx, args)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", op, ids[0], err)
	}
	statuses := make([]int64, 0, len(ids))
	for _, r := range reply {
		statuses = append(statuses, r.status)
		if r.status == 1 {
			observe(r.topic, 1)
		}
	}
	return statuses, nil
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

func (q *Queue) leaseChange(ctx context.Context, op string, script *redis.Script, id string, args ...any) (string, time.Time, error) {
	if id == "" {
		return "", time.Time{}, fmt.Errorf("%s: %w: id is empty", op, ErrInvalidJob)
	}
	reply, err := redis.Values(q.evalAck(ctx, script, nil, append([]any{id}, args...)...))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%s %s: %w", op, id, err)
	}
	var (
		status int
		state  string
		at     int64
		topic  string
	)
	if len(reply) < 4 {
		reply = append(reply, "")
	}
	if _, err := redis.Scan(reply, &status, &state, &at, &topic); err != nil {
		return "", time.Time{}, fmt.Errorf("%s %s: reply: %w", op, id, err)
	}
	switch status {
	case 0:
		return "", time.Time{}, fmt.Errorf("%s %s: %w", op, id, ErrNotFound)
	case -1:
		if state == StateDead {
			return state, time.Time{}, fmt.Errorf("%s %s: %w", op, id, ErrDead)
		}
		return state, time.Time{}, fmt.Errorf("%s %s: %w (it is %s)", op, id, ErrNotReserved, state)
	case -2:
		return state, time.Time{}, fmt.Errorf("%s %s: %w", op, id, ErrStaleDelivery)
	}
	if state == StateDead {
		q.obs.JobsDeadLettered(topic, 1)
	}
	return state, time.UnixMilli(at), nil
}

// Get returns the stored view of a job, or nil when there is no such job.
func (q *Queue) Get(ctx context.Context, id string) (*JobInfo, error) {
	var fields map[string]string
	err := q.withConn(ctx, func(c redis.Conn) error {
		var err error
		fields, err = redis.StringMap(c.Do("HGETALL", q.keys.job(id)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	if len(fields) == 0 {
		return nil, nil
	}
	return jobInfoFromFields(id, fields), nil
}

func jobInfoFromFields(id string, fields map[string]string) *JobInfo {
	info := &JobInfo{
		ID:          id,
		Topic:       fields["t"],
		State:       fields["s"],
		TTR:         time.Duration(atoi(fields["r"])) * time.Second,
		Attempts:    int(atoi(fields["a"])),
		DueAt:       time.UnixMilli(atoi(fields["d"])),
		CreatedAt:   time.UnixMilli(atoi(fields["c"])),
		Body:        bodyFromFields(fields),
		MaxAttempts: int(atoi(fields["m"])),
		DeadReason:  fields["dr"],
	}
	if l, ok := fields["l"]; ok {
		info.LeaseUntil = time.UnixMilli(atoi(l))
	}
	if dt, ok := fields["dt"]; ok {
		info.DeadAt = time.UnixMilli(atoi(dt))
	}
	if cb := fields["cb"]; cb != "" {
		var c Callback
		if json.Unmarshal([]byte(cb), &c) == nil {
			info.Callback = &c
		}
		info.LastStatus = int(atoi(fields["ls"]))
		info.LastError = fields["le"]
		info.LastResponse = fields["lb"]
	}
	if rt := fields["rt"]; rt != "" {
		for _, p := range strings.Split(rt, ",") {
			info.Retry = append(info.Retry, int(atoi(p)))
		}
	}
	return info
}

// bodyFromFields reassembles a body stored by the scripts' write_body.
func bodyFromFields(fields map[string]string) string {
	n := atoi(fields["n"])
	if n < 0 {
		return fields["b"]
	}
	var body []byte
	for i := int64(1); i <= n; i++ {
		body = append(body, fields["b"+strconv.FormatInt(i, 10)]...)
	}
	return string(body)
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

// execRemovals runs the ids of several Finish or Delete calls (each an
// []any of ids) in one script call.
func (q *Queue) execRemovals(script *redis.Script) func(context.Context, [][]any) ([][]removal, error) {
	return func(ctx context.Context, calls [][]any) ([][]removal, error) {
		n := 0
		for _, c := range calls {
			n += len(c)
		}
		args := make([]any, 0, n)
		for _, c := range calls {
			args = append(args, c...)
		}
		reply, err := redis.Values(q.evalAck(ctx, script, nil, args...))
		if err != nil {
			return nil, err
		}
		if len(reply) != 2*n {
			return nil, fmt.Errorf("reply of %d values for %d ids", len(reply), n)
		}
		// One array for every removal of the batch.
		all := make([]removal, n)
		out := make([][]removal, len(calls))
		for i, c := range calls {
			out[i] = all[:len(c):len(c)]
			for j := range out[i] {
				status, ok1 := reply[0].(int64)
				topic, ok2 := reply[1].([]byte)
				if !ok1 || !ok2 {
					return nil, fmt.Errorf("reply: unexpected value types %T %T", reply[0], reply[1])
				}
				out[i][j] = removal{status: status, topic: string(topic)}
				reply = reply[2:]
			}
			all = all[len(c):]
		}
		return out, nil
	}
}
