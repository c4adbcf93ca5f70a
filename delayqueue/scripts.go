package delayqueue

import (
	"context"
	"embed"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts holds every state change of the engine, one Lua script each, all
// sharing the state machine of scripts/lib.lua. Each is sent with EVALSHA,
// falling back to EVAL when Redis lost its script cache (a restart, SCRIPT
// FLUSH).
type scripts struct {
	push, claim, moveDue, finish, remove, unclaim, release, touch *redis.Script
	kick, deadDelete, deadSweep, importLegacy, claimHook          *redis.Script
	// names maps each script to its file name, for the logs.
	names map[*redis.Script]string
}

func loadScripts() (scripts, error) {
	lib, err := scriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		return scripts{}, fmt.Errorf("read scripts/lib.lua: %w", err)
	}
	s := scripts{names: make(map[*redis.Script]string)}
	for _, e := range []struct {
		dst      **redis.Script
		name     string
		keyCount int
	}{
		{&s.push, "push.lua", 0},
		{&s.claim, "claim.lua", 0},
		{&s.moveDue, "movedue.lua", 1},
		{&s.finish, "finish.lua", 0},
		{&s.remove, "delete.lua", 0},
		{&s.unclaim, "unclaim.lua", 0},
		{&s.release, "release.lua", 0},
		{&s.touch, "touch.lua", 0},
		{&s.kick, "kick.lua", 0},
		{&s.deadDelete, "deaddelete.lua", 0},
		{&s.deadSweep, "deadsweep.lua", 0},
		{&s.importLegacy, "import.lua", 2},
		{&s.claimHook, "claimhook.lua", 0},
	} {
		src, err := scriptFiles.ReadFile("scripts/" + e.name)
		if err != nil {
			return scripts{}, fmt.Errorf("read scripts/%s: %w", e.name, err)
		}
		*e.dst = redis.NewScript(e.keyCount, string(lib)+"\n"+string(src))
		s.names[*e.dst] = e.name
	}
	return s, nil
}

func (s scripts) all() []*redis.Script {
	return []*redis.Script{s.push, s.claim, s.moveDue, s.finish, s.remove, s.unclaim, s.release, s.touch,
		s.kick, s.deadDelete, s.deadSweep, s.importLegacy, s.claimHook}
}

// name is the file name of one of the scripts.
func (s scripts) name(sc *redis.Script) string { return s.names[sc] }

// loadAll sends every script to Redis, so the first calls need no EVAL.
func (s scripts) loadAll(c redis.Conn) error {
	for _, sc := range s.all() {
		if err := sc.Load(c); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}

// eval runs script with keys, the ARGV header every script expects (see
// scripts/lib.lua) and args.
func (q *Queue) eval(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	return q.evalScript(ctx, false, script, keys, args...)
}

// evalAck is eval for changes acknowledged to a client (push, finish,
// delete, release, kick...): with Options.WaitReplicas set, it also waits
// until that many replicas have the change, and fails with
// ErrNotReplicated when they don't in time, so that the client retries
// rather than trusting a change a failover could lose.
func (q *Queue) evalAck(ctx context.Context, script *redis.Script, keys []string, args ...any) (any, error) {
	return q.evalScript(ctx, q.opts.WaitReplicas > 0, script, keys, args...)
}

// scriptHeader is the ARGV header every script expects (see
// scripts/lib.lua), made once: its values are boxed once, not per call.
func scriptHeader(keys keySchema, opts Options) []any {
	return []any{keys.prefix, keys.bucketPrefix, keys.bucketSuffix, keys.readyPrefix, keys.readySuffix,
		wakeTokenCap, opts.DeadMaxPerTopic, opts.DeadTTL.Milliseconds()}
}

func (q *Queue) evalScript(ctx context.Context, wait bool, script *redis.Script, keys []string, args ...any) (any, error) {
	all := make([]any, 0, len(keys)+8+len(args))
	for _, k := range keys {
		all = append(all, k)
	}
	all = append(all, q.argvHeader...)
	all = append(all, args...)
	var reply any
	err := q.withConn(ctx, func(c redis.Conn) error {
		var err error
		reply, err = script.Do(c, all...)
		if err != nil || !wait {
			return err
		}
		acked, err := redis.Int(c.Do("WAIT", q.opts.WaitReplicas, q.opts.WaitTimeout.Milliseconds()))
		if err != nil {
			return err
		}
		if acked < q.opts.WaitReplicas {
			return fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acked, q.opts.WaitReplicas, q.opts.WaitTimeout)
		}
		return nil
	})
	return reply, err
}
