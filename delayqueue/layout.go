package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/pause"
)

// The layout record, <prefix>layout, says how the data is laid out: the
// layout's version and the partition count the jobs were written with.
// Changing bucket_size on data that holds jobs would send ids to other
// partitions than theirs, so a server refuses to start with another count
// (Repartition changes it, offline).
//
// Version 3 added job records with flag 4, whose due entries the scanner
// moves to ready without rewriting the record (scripts/lib.lua): a release
// that knows only version 2 would drop such jobs' ready entries. Version 2
// data needs no migration, since the scripts read both forms; a server
// raises the recorded version, and refuses data of a newer one.
const layoutVersion = 3

// ErrLayout reports data laid out differently from the configuration.
var ErrLayout = errors.New("layout mismatch")

// Layout is the layout record as read from Redis.
type Layout struct {
	Version    int
	Partitions int
	// MovingTo is the partition count an interrupted Repartition was
	// moving the jobs to; 0 when none.
	MovingTo int
}

// ReadLayout reads the layout record; found is false when there is none
// (new data, or a layout from before the record).
func ReadLayout(ctx context.Context, rdb Redis, keyPrefix string) (layout Layout, found bool, err error) {
	if keyPrefix == "" {
		keyPrefix = defaults.KeyPrefix
	}
	key := keySchema{prefix: keyPrefix}.layout()
	var fields map[string]string
	err = rdb.Do(ctx, key, func(c redis.Conn) error {
		var err error
		fields, err = redis.StringMap(c.Do("HGETALL", key))
		return err
	})
	if err != nil {
		return Layout{}, false, fmt.Errorf("read %s: %w", key, err)
	}
	if len(fields) == 0 {
		return Layout{}, false, nil
	}
	layout.Version, _ = strconv.Atoi(fields["version"])
	layout.Partitions, _ = strconv.Atoi(fields["partitions"])
	layout.MovingTo, _ = strconv.Atoi(fields["moving_to"])
	if layout.Partitions < 1 {
		return Layout{}, false, fmt.Errorf("%s: no valid partition count in %v", key, fields)
	}
	return layout, true, nil
}

// ResolvePartitions is the partition count a server must use: the one the
// data was written with when the layout record has one, else configured,
// or fallback when configured is 0 (bucket_size left unset). A configured
// count that differs from the record's is an error wrapping ErrLayout,
// saying what to do.
func ResolvePartitions(ctx context.Context, rdb Redis, keyPrefix string, configured, fallback int) (int, error) {
	layout, found, err := ReadLayout(ctx, rdb, keyPrefix)
	if err != nil {
		return 0, err
	}
	switch {
	case found && layout.MovingTo > 0:
		return 0, fmt.Errorf("%w: a change of bucket_size from %d to %d was interrupted: run delay-queue -c <conf> -repartition %d again, with every server stopped",
			ErrLayout, layout.Partitions, layout.MovingTo, layout.MovingTo)
	case found && configured > 0 && configured != layout.Partitions:
		return 0, fmt.Errorf("%w: bucket_size = %d, but the jobs in Redis are spread over %d partitions: set bucket_size = %d (or leave it unset), or, with every server stopped, run delay-queue -c <conf> -repartition %d",
			ErrLayout, configured, layout.Partitions, layout.Partitions, configured)
	case found:
		return layout.Partitions, nil
	case configured > 0:
		return configured, nil
	}
	return fallback, nil
}

// recordLayout writes the layout record, unless one is there, and raises
// its version to this release's: a record with another count (a server
// started meanwhile with another bucket_size), or of a newer version, is
// an error.
func (q *Queue) recordLayout(ctx context.Context) error {
	key := q.keys.layout()
	var recorded, version int
	err := q.withConn(ctx, key, func(c redis.Conn) error {
		if _, err := c.Do("HSETNX", key, "partitions", len(q.partitions)); err != nil {
			return err
		}
		if _, err := c.Do("HSETNX", key, "version", layoutVersion); err != nil {
			return err
		}
		values, err := redis.Ints(c.Do("HMGET", key, "partitions", "version"))
		if err != nil {
			return err
		}
		recorded, version = values[0], values[1]
		if version < layoutVersion {
			_, err = c.Do("HSET", key, "version", layoutVersion)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("record the layout: %w", err)
	}
	if recorded != len(q.partitions) {
		return fmt.Errorf("%w: this server uses %d partitions, but %s says %d", ErrLayout, len(q.partitions), key, recorded)
	}
	if version > layoutVersion {
		return fmt.Errorf("%w: %s says the data is of layout version %d, written by a newer release of delay-queue; this one reads up to version %d: run the newer release",
			ErrLayout, key, version, layoutVersion)
	}
	return nil
}

// layoutWatchInterval is how often a running server reads the layout
// record, and Repartition waits twice as long after marking its move, so
// that every running server has stopped serving jobs before one moves.
const layoutWatchInterval = 2 * time.Second

// watchLayout reads the layout record every layoutWatchInterval. When it
// says another partition count, or a move under way (-repartition run
// while this server runs), the server stops serving jobs for good: they
// would go to partitions no server of the new count reads. Its job calls
// and its readiness answer the error from then on, and it says so once.
func (q *Queue) watchLayout(ctx context.Context) {
	t := time.NewTicker(layoutWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		layout, found, err := ReadLayout(ctx, q.rdb, q.keys.prefix)
		if err != nil || !found {
			continue // an outage is logged by the other loops; no record yet before the migration ends
		}
		var changed error
		switch {
		case layout.MovingTo > 0:
			changed = fmt.Errorf("%w: the jobs are being moved to %d partitions (-repartition): this server, of %d, serves no job; stop it, and start it with bucket_size = %d once the move is done",
				ErrLayout, layout.MovingTo, len(q.partitions), layout.MovingTo)
		case layout.Partitions != len(q.partitions):
			changed = fmt.Errorf("%w: the jobs were moved to %d partitions (-repartition): this server, of %d, serves no job; restart it with bucket_size = %d (or unset)",
				ErrLayout, layout.Partitions, len(q.partitions), layout.Partitions)
		default:
			continue
		}
		q.layoutChanged.Store(&changed)
		q.log.Error("the partition layout changed under this running server", "err", changed)
		return
	}
}

// migrate brings the jobs of older layouts into partitions, then records
// the layout. On a cluster there is nothing to migrate: the older layouts
// never ran on one.
func (q *Queue) migrate(ctx context.Context) error {
	if _, found, err := ReadLayout(ctx, q.rdb, q.keys.prefix); err != nil {
		return err
	} else if found || q.opts.Cluster {
		return q.recordLayout(ctx)
	}
	migrated, err := q.migrateV1(ctx)
	if err != nil {
		return fmt.Errorf("migrate jobs of the layout before partitions (%d moved so far): %w", migrated, err)
	}
	imported, err := q.importV0(ctx)
	if err != nil {
		return fmt.Errorf("import jobs left by the original server (%d imported so far): %w", imported.imported, err)
	}
	if err := q.dropV1Keys(ctx); err != nil {
		return err
	}
	q.log.Info("migrated jobs of this server's layout before partitions", "count", migrated, "partitions", len(q.partitions))
	q.log.Info("imported jobs left by the original server", "count", imported.imported, "left_as_they_were", imported.left)
	return q.recordLayout(ctx)
}

// migrationCall runs an exempt migration script on partition p's keys
// followed by extra keys of the old layouts.
func (q *Queue) migrationCall(ctx context.Context, p *partition, script *script, extra []string, args ...any) (any, error) {
	return q.callScript(ctx, p, false, script, nil, extra, args...)
}

// migrateV1 moves the jobs of this server's layout before partitions (a
// hash per job) into their partitions, one atomic script call each: first
// the ready jobs, in the order of their ready lists, then the others.
func (q *Queue) migrateV1(ctx context.Context) (int, error) {
	lists, err := q.scanKeys(ctx, globEscape(q.keys.readyPrefix)+"*"+globEscape(q.keys.readySuffix), "list")
	if err != nil {
		return 0, fmt.Errorf("list the old ready lists: %w", err)
	}
	migrated := 0
	for _, list := range lists {
		n, err := q.migrateV1ReadyList(ctx, list)
		migrated += n
		if err != nil {
			return migrated, err
		}
	}
	hashes, err := q.scanKeys(ctx, globEscape(q.keys.v1JobPrefix())+"*", "hash")
	if err != nil {
		return migrated, fmt.Errorf("list the old jobs: %w", err)
	}
	for _, key := range hashes {
		moved, err := q.migrateV1Job(ctx, key[len(q.keys.v1JobPrefix()):], nil)
		if err != nil {
			return migrated, err
		}
		if moved == v1Moved {
			migrated++
		}
	}
	return migrated, nil
}

// migrateV1ReadyList moves the ready jobs of one old ready list in its
// order: each gets a ready position at its due time, or at the one before
// it in the list when that is later, so that the jobs of a topic pop in
// the order they had, and before those that come due after them. (The
// list may also hold the original server's ids, which the import takes.)
func (q *Queue) migrateV1ReadyList(ctx context.Context, list string) (int, error) {
	migrated := 0
	readyAt := int64(0) // the last ready job's position, unix ms
	err := q.walkOldList(ctx, list, func(id string) (bool, error) {
		moved, err := q.migrateV1Job(ctx, id, &readyAt)
		if moved == v1Moved {
			migrated++
		}
		return moved != v1NotOld, err
	})
	return migrated, err
}

// v1Move is what migrateV1Job did with an id.
type v1Move int

const (
	v1NotOld  v1Move = iota // no job of the old layout: left as it was
	v1Moved                 // moved into its partition
	v1Dropped               // in its partition already: the old copy dropped
)

// migrateV1Job moves the old job id, if it is one and is not moved yet. A
// ready job's position is at the time of the move when readyAt is nil;
// else at its due time or at *readyAt (unix ms), whichever is later, and
// *readyAt becomes that time.
func (q *Queue) migrateV1Job(ctx context.Context, id string, readyAt *int64) (v1Move, error) {
	key := q.keys.v1JobPrefix() + id
	var fields []string
	err := q.withConn(ctx, key, func(c redis.Conn) error {
		var err error
		fields, err = redis.Strings(c.Do("HMGET", key, "t", "k", "d", "s"))
		return err
	})
	if err != nil {
		return v1NotOld, fmt.Errorf("read %s: %w", key, err)
	}
	topic, bucket, dueAt, state := fields[0], atoi(fields[1]), atoi(fields[2]), fields[3]
	if state == "" {
		return v1NotOld, nil
	}
	bucket = max(bucket, 1)
	positionAt := ""
	if readyAt != nil && state == "ready" {
		*readyAt = max(*readyAt, dueAt)
		if *readyAt > 0 { // else no due time was recorded: the time of the move
			positionAt = strconv.FormatInt(*readyAt, 10)
		}
	}
	p := q.partitionOf(id)
	n, err := redis.Int(q.migrationCall(ctx, p, q.scripts.migrateV1,
		[]string{key, q.keys.bucketName(int(bucket)), q.keys.legacyReady(topic), q.keys.v1Dead(topic), q.keys.v1Hooks()}, id, positionAt))
	switch {
	case err != nil:
		return v1NotOld, fmt.Errorf("migrate %s: %w", id, err)
	case n == 1:
		return v1Moved, nil
	case n == 0:
		return v1Dropped, nil
	}
	return v1NotOld, nil
}

// dropV1Keys deletes what the layout before partitions kept besides its
// jobs (all moved by now): its counters, topics, wake-up lists, dead-letter
// sets and webhook lists, and its bucket entries scored in milliseconds.
// Entries of the original server's (scored in seconds) stay for the
// import, which has run.
func (q *Queue) dropV1Keys(ctx context.Context) error {
	var drop []string
	for _, pattern := range []string{"count:*", "wake:*", "dead:*"} {
		keys, err := q.scanKeys(ctx, globEscape(q.keys.prefix)+pattern, "")
		if err != nil {
			return fmt.Errorf("list old keys: %w", err)
		}
		drop = append(drop, keys...)
	}
	drop = append(drop, q.keys.v1Topics(), q.keys.v1DeadDropped(), q.keys.v1Hooks(), q.keys.v1HookWake())
	buckets, err := q.scanKeys(ctx, globEscape(q.keys.bucketPrefix)+"*"+globEscape(q.keys.bucketSuffix), "zset")
	if err != nil {
		return fmt.Errorf("list old buckets: %w", err)
	}
	return q.withConn(ctx, q.partitions[0].key(), func(c redis.Conn) error {
		for _, k := range drop {
			if _, err := c.Do("DEL", k); err != nil {
				return fmt.Errorf("delete %s: %w", k, err)
			}
		}
		for _, b := range buckets {
			if _, err := c.Do("ZREMRANGEBYSCORE", b, "("+strconv.FormatInt(legacySecondsLimit, 10), "+inf"); err != nil {
				return fmt.Errorf("clean %s: %w", b, err)
			}
		}
		return nil
	})
}

// Repartition changes the partition count of the data to count, offline:
// every server must be stopped. It moves each job whose partition changes,
// in two steps (a copy into the new partition, then its removal from the
// old one: partitions may live on different cluster nodes, so no one
// script can do both). A run cut short (a crash) may leave a job in both;
// running it again resolves that, keeping the copy. The layout record says
// a move is under way until it is done, and servers refuse to start
// meanwhile. opts are the servers' options (bucket_size aside).
func Repartition(ctx context.Context, rdb Redis, opts Options, count int, logger *slog.Logger) (moved int, err error) {
	if count < 1 {
		return 0, fmt.Errorf("repartition: %w: the partition count must be at least 1", ErrInvalidJob)
	}
	layout, found, err := ReadLayout(ctx, rdb, opts.KeyPrefix)
	if err != nil {
		return 0, err
	}
	if !found {
		return 0, fmt.Errorf("repartition: no layout record: start the server once (it records the layout) before changing bucket_size")
	}
	if layout.MovingTo > 0 && layout.MovingTo != count {
		return 0, fmt.Errorf("repartition: %w: an interrupted move to %d partitions must be finished first: run delay-queue -c <conf> -repartition %d", ErrLayout, layout.MovingTo, layout.MovingTo)
	}
	fromOpts, toOpts := opts, opts
	fromOpts.BucketSize, toOpts.BucketSize = layout.Partitions, count
	from, err := New(rdb, fromOpts, logger)
	if err != nil {
		return 0, err
	}
	to, err := New(rdb, toOpts, logger)
	if err != nil {
		return 0, err
	}
	key := from.keys.layout()
	if err := rdb.Do(ctx, key, func(c redis.Conn) error {
		_, err := c.Do("HSET", key, "moving_to", count)
		return err
	}); err != nil {
		return 0, fmt.Errorf("repartition: record the move: %w", err)
	}
	// A server left running sees the mark within layoutWatchInterval and
	// stops serving jobs; none is stored in the old layout after the wait.
	logger.Info("repartition: the move is recorded; waiting for any server still running to stop serving jobs",
		"wait", 2*layoutWatchInterval)
	if err := pause.For(ctx, 2*layoutWatchInterval); err != nil {
		return 0, err
	}
	targetTags := make(map[string]bool)
	for _, p := range to.partitions {
		targetTags[p.tag] = true
	}
	for _, p := range from.partitions {
		n, err := repartitionFrom(ctx, from, to, p)
		moved += n
		if err != nil {
			return moved, fmt.Errorf("repartition: %s: %w", p.tag, err)
		}
		if !targetTags[p.tag] {
			if err := dropPartitionKeys(ctx, from, p); err != nil {
				return moved, fmt.Errorf("repartition: %s: %w", p.tag, err)
			}
		}
	}
	if err := rdb.Do(ctx, key, func(c redis.Conn) error {
		if _, err := c.Do("HSET", key, "partitions", count, "version", layoutVersion); err != nil {
			return err
		}
		_, err := c.Do("HDEL", key, "moving_to")
		return err
	}); err != nil {
		return moved, fmt.Errorf("repartition: record the new count: %w", err)
	}
	return moved, nil
}

// repartitionFrom moves the jobs of partition p of from that belong to
// another partition of to, until none is left.
func repartitionFrom(ctx context.Context, from, to *Queue, p *partition) (int, error) {
	moved := 0
	for {
		movedThisPass := 0
		cursor := "0"
		for {
			var ids []string
			err := from.withConn(ctx, p.key(), func(c redis.Conn) error {
				reply, err := redis.Values(c.Do("HSCAN", p.keyAt(keyJobs), cursor, "COUNT", 200))
				if err != nil {
					return err
				}
				var pairs []string
				if _, err := redis.Scan(reply, &cursor, &pairs); err != nil {
					return err
				}
				for i := 0; i+1 < len(pairs); i += 2 {
					ids = append(ids, pairs[i])
				}
				return nil
			})
			if err != nil {
				return moved, err
			}
			byTarget := make(map[*partition][]string)
			for _, id := range ids {
				if target := to.partitionOf(id); target.tag != p.tag {
					byTarget[target] = append(byTarget[target], id)
				}
			}
			for target, batch := range byTarget {
				n, err := moveJobs(ctx, from, to, p, target, batch)
				movedThisPass += n
				if err != nil {
					return moved + movedThisPass, err
				}
			}
			if cursor == "0" {
				break
			}
		}
		moved += movedThisPass
		if movedThisPass == 0 {
			return moved, nil
		}
	}
}

// moveJobs copies ids from partition src to dst, then deletes them from
// src.
func moveJobs(ctx context.Context, from, to *Queue, src, dst *partition, ids []string) (int, error) {
	present, err := copyJobs(ctx, from, to, src, dst, ids)
	if err != nil || len(present) == 0 {
		return 0, err
	}
	if _, err := from.callAck(ctx, src, from.scripts.remove, nil, present...); err != nil {
		return 0, fmt.Errorf("delete.lua: %w", err)
	}
	return len(present), nil
}

// copyJobs copies the jobs ids of partition src to dst (adopt.lua keeps a
// copy that is already there: that of a move cut short) and returns those
// src held.
func copyJobs(ctx context.Context, from, to *Queue, src, dst *partition, ids []string) ([]any, error) {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	reply, err := redis.Values(from.call(ctx, src, from.scripts.export, nil, args...))
	if err != nil {
		return nil, fmt.Errorf("export.lua: %w", err)
	}
	var adopt, present []any
	for i, v := range reply {
		pair, err := redis.Strings(v, nil)
		if err != nil {
			return nil, fmt.Errorf("export.lua: %w", err)
		}
		if len(pair) == 2 {
			adopt = append(adopt, ids[i], pair[0], pair[1])
			present = append(present, ids[i])
		}
	}
	if len(present) == 0 {
		return nil, nil
	}
	if _, err := to.callAck(ctx, dst, to.scripts.adopt, nil, adopt...); err != nil {
		return nil, fmt.Errorf("adopt.lua: %w", err)
	}
	return present, nil
}

// dropPartitionKeys deletes what an emptied partition keeps besides jobs:
// its counters (the ready positions, the dropped dead letters' totals), its
// timers, and its wake-up and control lists (found with SCAN on the node
// that holds the partition's slot).
func dropPartitionKeys(ctx context.Context, q *Queue, p *partition) error {
	return q.withConn(ctx, p.key(), func(c redis.Conn) error {
		drop := make([]string, 0, len(p.keys))
		for _, k := range p.keys {
			drop = append(drop, k.(string))
		}
		for _, prefix := range []string{q.keys.wakePrefix(p.tag), q.keys.controlPrefix(p.tag)} {
			var err error
			if drop, err = scanOn(c, drop, globEscape(prefix)+"*", ""); err != nil {
				return err
			}
		}
		for _, k := range drop {
			if _, err := c.Do("DEL", k); err != nil {
				return err
			}
		}
		return nil
	})
}
