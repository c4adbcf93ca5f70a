package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// Repartition moves every job, offline, to its partition of the new count,
// in the state it had, and leaves nothing in the partitions of the old
// count: on a cluster they move between slots of different primaries.
func TestRepartitionMovesEveryJob(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		const from, to = 3, 5
		var ready, delayed, reserved, dead []string
		// A queue of the old count, stopped when the subtest ends.
		t.Run(fmt.Sprint("jobs in ", from, " partitions"), func(t *testing.T) {
			q := newTestQueue(t, r, func(o *Options) { o.BucketSize = from })
			for i := range 12 {
				id := fmt.Sprint("ready-", i, ".")
				mustPush(t, q, Job{Topic: "moved", ID: id, Body: "body of " + id})
				ready = append(ready, id)
			}
			for i := range 6 {
				id := fmt.Sprint("delayed-", i, ".")
				mustPush(t, q, Job{Topic: "moved", ID: id, Delay: time.Hour, Body: strings.Repeat("long ", 40)})
				delayed = append(delayed, id)
			}
			for i := range 4 {
				id := fmt.Sprint("reserved-", i, ".")
				mustPush(t, q, Job{Topic: "held", ID: id, TTR: time.Hour})
				if d := mustPop(t, q, time.Second, "held"); d == nil || d.ID != id {
					t.Fatalf("pop = %+v, want %s", d, id)
				}
				reserved = append(reserved, id)
			}
			for i := range 3 {
				id := fmt.Sprint("dead-", i, ".")
				mustPush(t, q, Job{Topic: "gone", ID: id, MaxAttempts: 1})
				if d := mustPop(t, q, time.Second, "gone"); d == nil || d.ID != id {
					t.Fatalf("pop = %+v, want %s", d, id)
				}
				if state, _, err := q.Release(ctx, id, nil, 1); err != nil || state != StateDead {
					t.Fatalf("release %s = %s, %v", id, state, err)
				}
				dead = append(dead, id)
			}
		})
		if t.Failed() {
			t.FailNow()
		}

		rdb := r.client(t)
		opts := r.queueOptions(Options{BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s", CheckKeys: true, Cluster: rdb.Cluster()})
		moved, err := Repartition(ctx, rdb, opts, to, redistest.Logger(t))
		if err != nil {
			t.Fatalf("repartition: %v", err)
		}
		total := len(ready) + len(delayed) + len(reserved) + len(dead)
		if moved == 0 || moved > total {
			t.Fatalf("repartition moved %d jobs of %d", moved, total)
		}
		if l, found, err := ReadLayout(ctx, rdb, opts.KeyPrefix); err != nil || !found || l.Partitions != to || l.MovingTo != 0 {
			t.Fatalf("layout after the move = %+v, %v, %v", l, found, err)
		}

		q := newTestQueue(t, r, func(o *Options) { o.BucketSize = to })
		var newTags []string
		for _, p := range q.partitions {
			newTags = append(newTags, p.tag)
		}
		// Of the old partitions, not one of their keys is left (the wake-up
		// lists aside: TestRepartitionDropsTheOldWakeUpLists).
		for _, k := range rawContent(t, r) {
			if tag := partitionTagOf(k.key); tag != "" && !slices.Contains(newTags, tag) && !strings.HasPrefix(k.key, q.keys.wakePrefix(tag)) {
				t.Errorf("key %s (%s, %d items) is not in a partition of %d: %v", k.key, k.typ, len(k.items), to, newTags)
			}
		}
		for state, ids := range map[string][]string{StateReady: ready, StateDelay: delayed, StateReserved: reserved, StateDead: dead} {
			for _, id := range ids {
				info, err := q.Get(ctx, id)
				if err != nil || info == nil || info.State != state {
					t.Fatalf("%s after the move: %+v, %v; want it %s", id, info, err, state)
				}
			}
		}
		stats, err := q.Stats(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]TopicStats{"moved": {Ready: int64(len(ready)), Delay: int64(len(delayed))}, "held": {Reserved: int64(len(reserved))}, "gone": {Dead: int64(len(dead))}}
		if fmt.Sprint(stats) != fmt.Sprint(want) {
			t.Fatalf("stats after the move = %v, want %v", stats, want)
		}
		got := map[string]bool{}
		for len(got) < len(ready) {
			d := mustPop(t, q, time.Second, "moved")
			if d == nil || got[d.ID] || d.Body != "body of "+d.ID {
				t.Fatalf("pop after %d of %d ready jobs = %+v", len(got), len(ready), d)
			}
			got[d.ID] = true
		}
		if d := mustPop(t, q, 0, "moved"); d != nil {
			t.Fatalf("pop = %+v, want nothing: the rest is delayed", d)
		}
		list, n, err := q.DeadList(ctx, "gone", 0, 10)
		if err != nil || n != len(dead) || len(list) != len(dead) {
			t.Fatalf("dead list after the move = %+v, %d, %v", list, n, err)
		}
		if info, _ := q.Get(ctx, delayed[0]); info.Body != strings.Repeat("long ", 40) {
			t.Fatalf("a long body after the move: %q", info.Body)
		}
	})
}

// partitionTagOf is the hash tag a partition's key starts with, braces
// included, or "" for another key.
func partitionTagOf(key string) string {
	if !strings.HasPrefix(key, "{") {
		return ""
	}
	return key[:strings.IndexByte(key, '}')+1]
}

// A partition that Repartition empties and leaves out of the new count
// keeps no key: its topics' wake-up lists, which hold tokens for the ready
// jobs that no held pop took, go with the rest.
func TestRepartitionDropsTheOldWakeUpLists(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		var oldTags []string
		t.Run("ready jobs in 3 partitions", func(t *testing.T) {
			q := newTestQueue(t, r, func(o *Options) { o.BucketSize = 3 })
			for _, p := range q.partitions {
				oldTags = append(oldTags, p.tag)
			}
			for _, id := range idsPerPartition(t, q, "w-", 1) {
				mustPush(t, q, Job{Topic: "woken", ID: id})
			}
		})
		if t.Failed() {
			t.FailNow()
		}
		rdb := r.client(t)
		opts := r.queueOptions(Options{BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s", CheckKeys: true, Cluster: rdb.Cluster()})
		if _, err := Repartition(ctx, rdb, opts, 2, redistest.Logger(t)); err != nil {
			t.Fatalf("repartition: %v", err)
		}
		q := newTestQueue(t, r, func(o *Options) { o.BucketSize = 2 })
		for _, k := range rawContent(t, r) {
			if tag := partitionTagOf(k.key); slices.Contains(oldTags, tag) && !slices.ContainsFunc(q.partitions, func(p *partition) bool { return p.tag == tag }) {
				t.Errorf("key %s (%s of %d items) of a dropped partition is left", k.key, k.typ, len(k.items))
			}
		}
	})
}

// A server left running while -repartition moves the jobs stops serving
// jobs once the move is recorded, before a job moves: a push it took then
// would go to a partition no server of the new count reads. Its job calls
// and its readiness answer ErrLayout from then on.
func TestARunningServerStopsServingWhenTheJobsAreRepartitioned(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		q := newTestQueue(t, r, func(o *Options) { o.BucketSize = 3 })
		mustPush(t, q, Job{Topic: "running", ID: "before", TTR: time.Minute})

		rdb := r.client(t)
		opts := r.queueOptions(Options{BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s", CheckKeys: true, Cluster: rdb.Cluster()})
		done := make(chan error, 1)
		go func() {
			_, err := Repartition(ctx, rdb, opts, 5, redistest.Logger(t))
			done <- err
		}()
		// Pushes acknowledged until it refuses them; each must be moved.
		acknowledged := []string{"before"}
		redistest.WaitFor(t, 10*time.Second, "the running server to refuse pushes", func() bool {
			id := fmt.Sprint("during-", len(acknowledged))
			_, err := q.Push(ctx, Job{Topic: "running", ID: id, TTR: time.Minute})
			if err == nil {
				acknowledged = append(acknowledged, id)
			}
			return errors.Is(err, ErrLayout)
		})
		if err := q.Ready(ctx); !errors.Is(err, ErrLayout) {
			t.Errorf("ready = %v, want ErrLayout", err)
		}
		// Its reads across jobs too: they would show an empty queue.
		if _, err := q.Stats(ctx, ""); !errors.Is(err, ErrLayout) {
			t.Errorf("stats = %v, want ErrLayout", err)
		}
		if _, err := q.Topics(ctx); !errors.Is(err, ErrLayout) {
			t.Errorf("topics = %v, want ErrLayout", err)
		}
		if _, _, err := q.Upcoming(ctx, time.Minute, 60); !errors.Is(err, ErrLayout) {
			t.Errorf("upcoming = %v, want ErrLayout", err)
		}
		if err := <-done; err != nil {
			t.Fatalf("repartition: %v", err)
		}
		if _, err := q.Get(ctx, "before"); !errors.Is(err, ErrLayout) {
			t.Errorf("get after the move = %v, want ErrLayout", err)
		}
		// A server of the new count finds every job the old one stored.
		moved := newTestQueue(t, r, func(o *Options) { o.BucketSize = 5 })
		for _, id := range acknowledged {
			if info, err := moved.Get(ctx, id); err != nil || info == nil {
				t.Errorf("%s, acknowledged by the old server, after the move: %+v, %v", id, info, err)
			}
		}
	})
}
