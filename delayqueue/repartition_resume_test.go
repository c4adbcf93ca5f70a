package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// repartitionFixture pushes jobs in every state through a queue of from
// partitions, and returns their ids by state.
func repartitionFixture(t *testing.T, q *Queue) map[string][]string {
	t.Helper()
	ctx := context.Background()
	ids := map[string][]string{}
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("delayed-%d", i)
		mustPush(t, q, Job{Topic: "rp", ID: id, Delay: time.Hour, Body: "d" + id})
		ids[StateDelay] = append(ids[StateDelay], id)
	}
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("reserved-%d", i)
		mustPush(t, q, Job{Topic: "rp-held", ID: id, TTR: time.Hour, Body: "r" + id})
		if d := mustPop(t, q, time.Second, "rp-held"); d == nil {
			t.Fatalf("pop %s: nothing", id)
		}
		ids[StateReserved] = append(ids[StateReserved], id)
	}
	for i := 0; i < 10; i++ {
		id := fmt.Sprintf("dead-%d", i)
		mustPush(t, q, Job{Topic: "rp-dead", ID: id, MaxAttempts: 1, Body: "x" + id})
		d := mustPop(t, q, time.Second, "rp-dead")
		if d == nil {
			t.Fatalf("pop %s: nothing", id)
		}
		if state, _, err := q.Release(ctx, d.ID, nil, 0); err != nil || state != StateDead {
			t.Fatalf("release %s = %s, %v", d.ID, state, err)
		}
		ids[StateDead] = append(ids[StateDead], d.ID)
	}
	for i := 0; i < 20; i++ {
		id := fmt.Sprintf("ready-%d", i)
		mustPush(t, q, Job{Topic: "rp", ID: id, Body: "y" + id})
		ids[StateReady] = append(ids[StateReady], id)
	}
	return ids
}

// checkRepartitioned checks every fixture job is in its state, once, on a
// queue of the new count, and that the ready ones pop.
func checkRepartitioned(t *testing.T, q *Queue, ids map[string][]string) {
	t.Helper()
	ctx := context.Background()
	for state, list := range ids {
		for _, id := range list {
			info, err := q.Get(ctx, id)
			if err != nil || info == nil || info.State != state {
				t.Fatalf("after the move, %s = %+v, %v; want it %s", id, info, err, state)
			}
		}
	}
	stats, err := q.Stats(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]TopicStats{
		"rp":      {Delay: 20, Ready: 20},
		"rp-held": {Reserved: 10},
		"rp-dead": {Dead: 10},
	}
	if fmt.Sprint(stats) != fmt.Sprint(want) {
		t.Fatalf("stats after the move %v, want %v", stats, want)
	}
	popped := map[string]bool{}
	for range 20 {
		d := mustPop(t, q, time.Second, "rp")
		if d == nil {
			break
		}
		if popped[d.ID] || d.Body != "y"+d.ID {
			t.Fatalf("popped %+v (twice, or with another body)", d)
		}
		popped[d.ID] = true
	}
	if len(popped) != 20 {
		t.Fatalf("popped %d ready jobs after the move, want 20", len(popped))
	}
}

// Changing the partition count: the servers refuse a count that differs
// from the data's; a run of Repartition cut short between a copy and its
// removal leaves a job in two partitions, servers refuse to start
// meanwhile, and the next run resolves it.
func TestRepartitionCutShortResumes(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		opts := r.queueOptions(Options{BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s", BlockTimeout: 30 * time.Second, CheckKeys: true})
		q3 := newTestQueue(t, r)
		ids := repartitionFixture(t, q3)

		rdb := r.client(t)
		if n, err := ResolvePartitions(ctx, rdb, opts.KeyPrefix, 0, 7); err != nil || n != 3 {
			t.Fatalf("unset bucket_size resolved to %d, %v; want the recorded 3", n, err)
		}
		if _, err := ResolvePartitions(ctx, rdb, opts.KeyPrefix, 5, 3); !errors.Is(err, ErrLayout) {
			t.Fatalf("bucket_size 5 on data of 3 partitions: %v, want ErrLayout", err)
		}

		// A first run cut short: one job copied into its new partition,
		// but not removed from its old one.
		opts.Cluster = rdb.Cluster() // for Repartition below; newQueue sets its own
		to5 := opts
		to5.BucketSize = 5
		from3 := opts
		from3.BucketSize = 3
		to := newQueue(t, rdb, to5, redistest.Logger(t))
		from := newQueue(t, rdb, from3, redistest.Logger(t))
		var copied string
		for _, id := range ids[StateDelay] {
			if src, dst := from.partitionOf(id), to.partitionOf(id); src.tag != dst.tag {
				copied = id
				if err := rdb.Do(ctx, from.keys.layout(), func(c redis.Conn) error {
					_, err := c.Do("HSET", from.keys.layout(), "moving_to", 5)
					return err
				}); err != nil {
					t.Fatal(err)
				}
				if got, err := copyJobs(ctx, from, to, src, dst, []string{id}); err != nil || len(got) != 1 {
					t.Fatalf("copy %s: %v, %v", id, got, err)
				}
				break
			}
		}
		if copied == "" {
			t.Fatal("no job changes partition from 3 to 5: the fixture tests nothing")
		}
		if _, err := ResolvePartitions(ctx, rdb, opts.KeyPrefix, 0, 3); !errors.Is(err, ErrLayout) {
			t.Fatalf("start during an interrupted move: %v, want ErrLayout", err)
		}

		moved, err := Repartition(ctx, rdb, opts, 5, redistest.Logger(t))
		if err != nil || moved == 0 {
			t.Fatalf("repartition = %d, %v", moved, err)
		}
		if l, found, err := ReadLayout(ctx, rdb, opts.KeyPrefix); err != nil || !found || l.Partitions != 5 || l.MovingTo != 0 {
			t.Fatalf("layout after the move %+v, %v, %v", l, found, err)
		}
		q5 := newTestQueue(t, r, func(o *Options) { o.BucketSize = 5 })
		checkRepartitioned(t, q5, ids)
		// Nothing is left in a partition of the old count.
		newTags := map[string]bool{}
		for _, p := range to.partitions {
			newTags[p.tag] = true
		}
		for _, p := range from.partitions {
			if newTags[p.tag] {
				continue
			}
			for _, k := range p.keys {
				var n int
				err := rdb.Do(ctx, p.key(), func(c redis.Conn) error {
					var err error
					n, err = redis.Int(c.Do("EXISTS", k))
					return err
				})
				if err != nil || n != 0 {
					t.Fatalf("old partition key %s left after the move (%v)", k, err)
				}
			}
		}
	})
}
