package delayqueue

// redis.go: how the engine reaches Redis. Every call goes through
// withConn, which tells an outage from an error reply; every script call
// through callScript, which passes the partition's keys and the script's
// ARGV header. A partition whose Redis did not answer is marked down for a
// moment, and job methods wait here for the start-up migration.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redisconn"
)

// Redis reaches the server that holds a key: the one Redis, or the
// cluster primary serving the key's hash slot. *redisconn.Client
// implements it.
type Redis interface {
	// Do runs f on a pooled connection to the server holding key,
	// following cluster redirections.
	Do(ctx context.Context, key string, f func(redis.Conn) error) error
	// Dial opens a connection of its own to the server holding key, for a
	// blocking loop.
	Dial(ctx context.Context, key string) (redis.Conn, error)
}

// withConn runs f on a pooled connection to the server holding key and
// records whether Redis answered. Failures to reach Redis come back
// wrapped in ErrUnavailable, and a write refused for lack of memory in
// ErrRedisFull.
func (q *Queue) withConn(ctx context.Context, key string, f func(redis.Conn) error) error {
	started := time.Now()
	err := q.rdb.Do(ctx, key, f)
	if err == nil {
		q.noteRedis(key, nil)
		return nil
	}
	if answeredByRedis(err) || errors.Is(err, ErrNotReplicated) {
		// Redis answered, and no outage: with an error (a bug or a misuse,
		// or its memory is full, which the client is told as such), or
		// with a change made and not copied to enough replicas in time
		// (WAIT).
		q.noteRedis(key, nil)
		if redisconn.IsOutOfMemoryReply(err) {
			return fmt.Errorf("%w: %w", ErrRedisFull, err)
		}
		return err
	}
	q.noteRedisSince(key, err, started)
	if errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// noteRedis records whether Redis answered a call on key (err is nil) or
// did not, for the outage's log lines (see outages) and its metric.
func (q *Queue) noteRedis(key string, err error) { q.noteRedisSince(key, err, time.Time{}) }

// noteRedisSince is noteRedis for a call begun at started.
func (q *Queue) noteRedisSince(key string, err error, started time.Time) {
	switch {
	case err == nil:
		q.outages.answered(key)
	case !errors.Is(err, context.Canceled):
		q.obs.RedisError()
		q.outages.failed(key, err, started)
	}
}

// unavailableUnlessAnswered is err wrapped in ErrUnavailable unless Redis
// answered it with an error of its own (as withConn does for a whole
// call): for a loop's own connection, and for one reply of a pipeline.
func unavailableUnlessAnswered(err error) error {
	if answeredByRedis(err) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// answeredByRedis reports whether err is an error reply of Redis' own, not
// a failure to reach it or a reply that means "Redis can't serve now".
func answeredByRedis(err error) bool {
	var redisErr redis.Error
	return errors.As(err, &redisErr) && !transientRedisError(redisErr)
}

// transientRedisError tells the error replies that mean "Redis can't serve
// now" (loading its data, a replica after a failover, a busy script, a
// cluster reconfiguring) from real errors.
func transientRedisError(err redis.Error) bool { return redisconn.IsTransientReply(err) }

// allDown reports whether every partition is marked down.
func (q *Queue) allDown() bool {
	for _, p := range q.partitions {
		if !p.isDown() {
			return false
		}
	}
	return true
}

// startWait bounds how long a call waits for Run to finish bringing older
// layouts' jobs over; an empty database takes milliseconds.
const startWait = 10 * time.Second

// started waits until Run has finished the migrations, for up to
// startWait or until ctx ends, and then returns ErrStarting.
func (q *Queue) started(ctx context.Context) error {
	if err := q.layoutStale(); err != nil {
		return err
	}
	select {
	case <-q.ready:
		return nil
	default:
	}
	t := time.NewTimer(startWait)
	defer t.Stop()
	select {
	case <-q.ready:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return ErrStarting
	}
}

// layoutStale is the layout error once the recorded layout no longer
// matches this server's (see watchLayout), else nil: the reads across
// jobs answer it too, as they would show an empty queue.
func (q *Queue) layoutStale() error {
	if changed := q.layoutChanged.Load(); changed != nil {
		return *changed
	}
	return nil
}

// downFor is how long Pops leave out a partition whose Redis did not
// answer.
const downFor = time.Second

// noteError marks the partition down when err says its Redis did not
// answer.
func (p *partition) noteError(err error) {
	if errors.Is(err, ErrUnavailable) {
		p.downUntil.Store(time.Now().Add(downFor).UnixNano())
	}
}

func (p *partition) isDown() bool { return time.Now().UnixNano() < p.downUntil.Load() }

// withConn runs f on a pooled connection to the partition's Redis, and
// marks the partition down when that Redis does not answer.
func (p *partition) withConn(ctx context.Context, f func(redis.Conn) error) error {
	err := p.q.withConn(ctx, p.key(), f)
	p.noteError(err)
	return err
}

// call is one script call on a partition: the partition's keys, then the
// wake-up lists of topics, and the script's own arguments.
func (q *Queue) call(ctx context.Context, p *partition, script *script, topics []string, args ...any) (any, error) {
	return q.callScript(ctx, p, false, script, topics, nil, args...)
}

// callAck is call for changes acknowledged to a client (push, finish,
// delete, release, kick...): with Options.WaitReplicas set, it also waits
// until that many replicas of the partition's primary have the change, and
// fails with ErrNotReplicated when they don't in time, so that the client
// retries rather than trusting a change a failover could lose.
func (q *Queue) callAck(ctx context.Context, p *partition, script *script, topics []string, args ...any) (any, error) {
	return q.callScript(ctx, p, q.opts.WaitReplicas > 0, script, topics, nil, args...)
}

// callScript runs script on p with KEYS the partition's keys, the wake-up
// lists of topics, then extra (the old layouts' keys a migration reads),
// and ARGV the header, the topics and args; with wait, it waits for the
// replicas (see callAck).
func (q *Queue) callScript(ctx context.Context, p *partition, wait bool, script *script, topics, extra []string, args ...any) (any, error) {
	// all[0] is for the function's name (see runScript).
	all := make([]any, 1, 2+len(p.keys)+len(topics)+len(extra)+len(q.argvHeader)+1+len(topics)+len(args))
	all = append(all, len(p.keys)+len(topics)+len(extra))
	all = append(all, p.keys...)
	for _, t := range topics {
		all = append(all, q.keys.wake(p.tag, t))
	}
	for _, k := range extra {
		all = append(all, k)
	}
	all = append(all, q.argvHeader...)
	all = append(all, len(topics))
	for _, t := range topics {
		all = append(all, t)
	}
	all = append(all, args...)
	var reply any
	err := q.withConn(ctx, p.key(), func(c redis.Conn) error {
		var err error
		reply, err = q.runScript(c, script, all)
		if err != nil || !wait {
			return err
		}
		return q.waitReplicas(c)
	})
	return reply, err
}

// runScript runs sc on c with args (args[0] left for the function's name,
// then the key count, the keys and ARGV): as a function of the library
// (FCALL), loading the library first where this Redis lacks it, or as a
// script of its own (EVALSHA) for the scripts outside the library and
// once Redis refused functions.
func (q *Queue) runScript(c redis.Conn, sc *script, args []any) (any, error) {
	if sc.function != "" && !q.scriptsOnly.Load() {
		args[0] = sc.function
		reply, err := c.Do("FCALL", args...)
		if err == nil {
			return reply, nil // the hot path: no reply to classify
		}
		if redisconn.IsFunctionMissingReply(err) {
			if err = q.scripts.lib.load(c); err == nil {
				reply, err = c.Do("FCALL", args...)
			}
		}
		if !redisconn.IsFunctionsRefusedReply(err) {
			return reply, err
		}
		q.refuseFunctions(err)
	}
	return sc.eval.Do(c, args[1:]...)
}

// ensureScriptsOn checks that c's Redis holds the partition scripts (the
// library, or each script where Redis refuses functions) and loads what
// it lacks.
func (q *Queue) ensureScriptsOn(c redis.Conn) error {
	if !q.scriptsOnly.Load() {
		libs, err := redis.Values(c.Do("FUNCTION", "LIST", "LIBRARYNAME", q.scripts.lib.name))
		if err == nil && len(libs) == 0 {
			err = q.scripts.lib.load(c)
		}
		if !redisconn.IsFunctionsRefusedReply(err) {
			return err
		}
		q.refuseFunctions(err)
	}
	all := q.scripts.partitionScripts()
	args := make([]any, 0, len(all)+1)
	args = append(args, "EXISTS")
	for _, s := range all {
		args = append(args, s.eval.Hash())
	}
	exists, err := redis.Ints(c.Do("SCRIPT", args...))
	if err != nil {
		return err
	}
	for i, ok := range exists {
		if ok == 0 {
			if err := all[i].eval.Load(c); err != nil {
				return fmt.Errorf("load script: %w", err)
			}
		}
	}
	return nil
}

// refuseFunctions makes every later call send scripts of their own, once
// Redis refused functions (it has none, or the ACL user may not use them).
func (q *Queue) refuseFunctions(err error) {
	if q.scriptsOnly.CompareAndSwap(false, true) {
		q.log.Info("redis refuses functions (a Redis before 7, or an ACL user without FCALL or FUNCTION); scripts are sent with EVALSHA", "err", replyGist(err))
	}
}

// replyGist is the start of err's text, for a log line: a refusal may
// repeat the command's arguments (miniredis repeats them all, the
// library's code included).
func replyGist(err error) string {
	const most = 200
	text := err.Error()
	if len(text) > most {
		return text[:most] + "..."
	}
	return text
}

// waitReplicas runs WAIT on c, after a change made on it. Its reply may
// take WaitTimeout, past the pooled connection's own reply timeout.
func (q *Queue) waitReplicas(c redis.Conn) error {
	acked, err := redis.Int(redis.DoWithTimeout(c, q.opts.WaitTimeout+5*time.Second,
		"WAIT", q.opts.WaitReplicas, q.opts.WaitTimeout.Milliseconds()))
	if err != nil {
		return err
	}
	if acked < q.opts.WaitReplicas {
		return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acked, q.opts.WaitReplicas, q.opts.WaitTimeout)
	}
	return nil
}

// scriptHeader is the start of the ARGV every script expects (see
// scripts/lib.lua), made once: its values are boxed once, not per call.
// The wake-up topics follow it, per call.
func scriptHeader(opts Options) []any {
	return []any{wakeTokenCap, deadMaxPerPartition(opts), opts.DeadTTL.Milliseconds()}
}

// deadMaxPerPartition is dead_max_per_topic shared out over the partitions
// (rounded up): a topic's dead letters spread over them as its jobs do.
func deadMaxPerPartition(opts Options) int {
	return (opts.DeadMaxPerTopic + opts.BucketSize - 1) / opts.BucketSize
}
