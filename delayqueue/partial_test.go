package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// A batch spanning partitions, one of which fails its script call, is done
// on the others: the error wraps ErrPartial, each job or id says what
// became of it, and the whole batch sent again completes it without
// touching what was already done twice.
func TestBatchDoneInPartWhenOnePartitionFails(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		broken := q.partitions[0]
		// Ids in every partition, the broken one's first.
		var ids []string
		seen := map[*partition]bool{}
		for i := 0; len(seen) < len(q.partitions) || len(ids) < 6; i++ {
			id := fmt.Sprintf("part-%d", i)
			if p := q.partitionOf(id); !seen[p] || len(ids) < 6 {
				seen[p] = true
				ids = append(ids, id)
			}
		}
		jobs := make([]Job, len(ids))
		for i, id := range ids {
			jobs[i] = Job{Topic: "partial", ID: id, TTR: time.Minute, Body: id}
		}

		// The broken partition's job hash is set aside and a string put in
		// its place: its scripts fail with WRONGTYPE while the other
		// partitions' calls succeed; mending puts the hash back.
		aside := broken.key() + ":aside" // the same hash tag, the same slot
		breakKey := func(on bool) {
			t.Helper()
			err := q.rdb.Do(ctx, broken.key(), func(c redis.Conn) error {
				from, to := broken.key(), aside
				if !on {
					if _, err := c.Do("DEL", broken.key()); err != nil {
						return err
					}
					from, to = aside, broken.key()
				}
				if _, err := c.Do("RENAME", from, to); err != nil && !strings.Contains(err.Error(), "no such key") {
					return err
				}
				if on {
					_, err := c.Do("SET", broken.key(), "not a hash")
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatalf("break (%v) partition %d: %v", on, broken.number, err)
			}
		}
		breakKey(true)
		results, err := q.PushBatch(ctx, jobs)
		if !errors.Is(err, ErrPartial) || len(results) != len(jobs) {
			t.Fatalf("push with one partition failing = %d results, %v; want one per job and ErrPartial", len(results), err)
		}
		for i, res := range results {
			want := PushCreated
			if q.partitionOf(ids[i]) == broken {
				want = PushFailed
			}
			if res.Status != want || (want == PushFailed) != (res.Err != nil) {
				t.Fatalf("job %s (partition %d): %+v, want status %v", ids[i], q.partitionOf(ids[i]).number, res, want)
			}
		}
		breakKey(false)
		for i, id := range ids {
			info, err := q.Get(ctx, id)
			if stored := q.partitionOf(id) != broken; err != nil || (info != nil) != stored {
				t.Fatalf("job %d %s after the partial push: %+v, %v; stored should be %v", i, id, info, err, stored)
			}
		}

		// The same batch again: stored jobs are replaced, the others created.
		results, err = q.PushBatch(ctx, jobs)
		if err != nil {
			t.Fatalf("push again: %v", err)
		}
		for i, res := range results {
			want := PushReplaced
			if q.partitionOf(ids[i]) == broken {
				want = PushCreated
			}
			if res.Status != want {
				t.Fatalf("job %s pushed again: %+v, want %v", ids[i], res, want)
			}
		}

		// Finishing and deleting by ids: the same, per id.
		for _, remove := range []struct {
			name string
			do   func(context.Context, []string) ([]RemoveStatus, error)
		}{{"delete", q.DeleteBatch}, {"finish", q.FinishBatch}} {
			breakKey(true)
			statuses, err := remove.do(ctx, ids)
			breakKey(false)
			if !errors.Is(err, ErrPartial) || len(statuses) != len(ids) {
				t.Fatalf("%s with one partition failing = %v, %v; want one status per id and ErrPartial", remove.name, statuses, err)
			}
			for i, st := range statuses {
				want := Removed
				if q.partitionOf(ids[i]) == broken {
					want = RemoveFailed
				}
				if remove.name == "finish" && want == Removed {
					want = RemoveUnknown // deleted by the batch before
				}
				if st != want {
					t.Fatalf("%s: id %s: %v, want %v", remove.name, ids[i], st, want)
				}
			}
		}
		// The broken partition's job survived both, and goes now.
		statuses, err := q.FinishBatch(ctx, ids)
		if err != nil {
			t.Fatalf("finish once mended: %v, %v", statuses, err)
		}
		for i, st := range statuses {
			want := RemoveUnknown
			if q.partitionOf(ids[i]) == broken {
				want = Removed
			}
			if st != want {
				t.Fatalf("finish once mended: id %s: %v, want %v", ids[i], st, want)
			}
		}
		for _, id := range ids {
			if info, err := q.Get(ctx, id); err != nil || info != nil {
				t.Fatalf("%s after the last finish: %+v, %v; want gone", id, info, err)
			}
		}
	})
}

// Jobs claimed for a consumer that left are given back: ready again at
// once, in the order they had, their delivery not counted; a job that
// moved on since (finished) is left alone.
func TestUnclaimGivesBackWhatAGoneConsumerWasGiven(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		const n = 9 // over every partition
		for i := range n {
			mustPush(t, q, Job{Topic: "back", ID: fmt.Sprintf("back-%d", i)})
		}
		first, err := q.PopBatch(ctx, []string{"back"}, n, time.Second)
		if err != nil || len(first) != n {
			t.Fatalf("pop = %d jobs, %v; want %d", len(first), err, n)
		}
		if err := q.Finish(ctx, first[n-1].ID); err != nil {
			t.Fatal(err)
		}
		// Given back last first: each goes back to its own place, not behind
		// those given back before it.
		for i := len(first) - 1; i >= 0; i-- {
			q.unclaim(first[i])
		}
		again, err := q.PopBatch(ctx, []string{"back"}, n, time.Second)
		if err != nil || len(again) != n-1 {
			t.Fatalf("pop after the give-back = %d jobs, %v; want the %d not finished", len(again), err, n-1)
		}
		pos := map[string]int{}
		for i, d := range first {
			pos[d.ID] = i
		}
		for _, d := range again {
			if d.Attempts != 1 {
				t.Errorf("%s given back comes with attempt %d, want 1: the lost delivery counts", d.ID, d.Attempts)
			}
			if _, ok := pos[d.ID]; !ok || d.ID == first[n-1].ID {
				t.Errorf("%s delivered again, want only the unfinished jobs", d.ID)
			}
		}
		// Within a partition, the order they had.
		last := map[*partition]int{}
		for _, d := range again {
			p := q.partitionOf(d.ID)
			if k, seen := last[p]; seen && pos[d.ID] < k {
				t.Errorf("partition %d gave %s back after a job claimed after it", p.number, d.ID)
			}
			last[p] = pos[d.ID]
		}
	})
}

// A pop reads the partitions for ready jobs of its topics, those of one
// server in one pipeline: a partition whose reads fail (here its ready
// index is not a ZSET, so each reply is WRONGTYPE) is left out, and the
// job of another partition read in the same pipeline is still found and
// claimed.
func TestPopFindsAJobWhenAnotherPartitionsReadFails(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r, func(o *Options) { o.BucketSize = 4 })
		ctx := context.Background()
		cursor := q.partitions[q.claimCursor.Load()%uint32(len(q.partitions))]
		var broken, holder *partition
		for _, p := range q.partitions {
			if p != cursor && broken == nil {
				broken = p
			} else if p != cursor && p != broken && holder == nil {
				holder = p
			}
		}
		// The job goes to the partition after the broken one in the order
		// of the reads, so that an error left in the pipeline would lose it.
		id := idIn(q, holder, "found")
		if _, err := q.Push(ctx, Job{Topic: "readfail", ID: id, TTR: time.Minute, Body: "b"}); err != nil {
			t.Fatal(err)
		}
		err := q.rdb.Do(ctx, broken.key(), func(c redis.Conn) error {
			_, err := c.Do("SET", broken.keyAt(keyReady), "not a zset")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// Two topics: a pop reads every partition first (the first listed
		// topic wins), two replies each.
		d, err := q.Pop(ctx, []string{"readfail-none", "readfail"}, 0)
		if err != nil || d == nil || d.ID != id {
			t.Fatalf("Pop = %+v, %v; want job %s from partition %d (partition %d's read fails)", d, err, id,
				holder.number, broken.number)
		}
		if broken.isDown() {
			t.Error("a partition whose Redis answered with an error was marked down")
		}
	})
}

// countingRedis counts the pooled-connection calls made through it, in
// all and per key.
type countingRedis struct {
	*redisconn.Client
	calls atomic.Int64

	mu    sync.Mutex
	byKey map[string]int64
}

func (c *countingRedis) Do(ctx context.Context, key string, f func(redis.Conn) error) error {
	c.calls.Add(1)
	c.mu.Lock()
	if c.byKey == nil {
		c.byKey = map[string]int64{}
	}
	c.byKey[key]++
	c.mu.Unlock()
	return c.Client.Do(ctx, key, f)
}

// callsOn is the number of calls made on key.
func (c *countingRedis) callsOn(key string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byKey[key]
}

// The reads a pop makes of the partitions for ready jobs go in one
// pipeline per server: one call on one Redis whatever the partition count,
// at most one per primary on a cluster, and the partition holding the job
// comes first.
func TestPopReadsPartitionsOncePerServer(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		logger := redistest.Logger(t)
		rdb := r.client(t)
		counted := &countingRedis{Client: rdb}
		q := newQueue(t, counted, r.queueOptions(Options{BucketSize: 12, BucketName: "dq_bucket_%d",
			QueueName: "dq_queue_%s", BlockTimeout: time.Second}), logger)
		ctx := context.Background()
		holder := q.partitions[7]
		err := rdb.Do(ctx, holder.key(), func(c redis.Conn) error {
			_, err := c.Do("ZADD", holder.keyAt(keyReady), 0, "rp-topic,0000000000000001,some-id")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		order := make([]uint32, len(q.partitions))
		servers := map[string]bool{}
		for i, p := range q.partitions {
			order[i] = uint32(i)
			servers[rdb.ServerOf(p.key())] = true
		}
		before := counted.calls.Load()
		got, has, err := q.byBestTopic(ctx, order, []string{"rp-none", "rp-topic"})
		calls := counted.calls.Load() - before
		if err != nil || len(got) != 1 || got[0] != 7 || !slices.Equal(has[7], []bool{false, true}) {
			t.Fatalf("byBestTopic = %v, %v, %v; want [7], the partition with the ready entry, having the second topic", got, has, err)
		}
		if calls != int64(len(servers)) {
			t.Errorf("reading %d partitions took %d calls, want one per server (%d)", len(order), calls, len(servers))
		}
	})
}

// A pop of several jobs over a topic list takes every ready job of the
// first topic, from every partition, before any of the next: the first
// listed topic wins for each job, as for a pop of one. Whichever partition
// the claims start at, a partition holding jobs of both topics gives its
// first topic's jobs only while another still has some of it ready.
func TestBatchPopTakesTheFirstTopicFromEveryPartition(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r, func(o *Options) { o.BucketSize = 3 })
		ctx := context.Background()
		mixed, other := q.partitions[0], q.partitions[1]
		for start := range q.partitions {
			urgent, normal := fmt.Sprintf("urgent%d", start), fmt.Sprintf("normal%d", start)
			var jobs []Job
			jobs = append(jobs, Job{Topic: urgent, ID: idIn(q, mixed, urgent+"-mixed"), TTR: time.Minute})
			for i := range 5 {
				jobs = append(jobs,
					Job{Topic: normal, ID: idIn(q, mixed, fmt.Sprintf("%s-%d", normal, i)), TTR: time.Minute},
					Job{Topic: urgent, ID: idIn(q, other, fmt.Sprintf("%s-%d", urgent, i)), TTR: time.Minute})
			}
			for _, job := range jobs {
				mustPush(t, q, job)
			}
			q.claimCursor.Store(uint32(start))
			q.claimStint.Store(0)
			got, err := q.PopBatch(ctx, []string{urgent, normal}, 8, 0)
			if err != nil {
				t.Fatal(err)
			}
			var topics []string
			for _, d := range got {
				topics = append(topics, d.Topic)
			}
			want := []string{urgent, urgent, urgent, urgent, urgent, urgent, normal, normal}
			if !slices.Equal(topics, want) {
				t.Errorf("claims starting at partition %d took %v; want the 6 %s jobs, then 2 %s", start, topics, urgent, normal)
			}
		}
	})
}

// Interrupts of a dispatch loop coalesce: a burst of them after its topics
// changed (held pops coming) costs a few Redis calls, not one each, and the
// loop then listens to every new topic.
func TestInterruptsOfALoopCoalesce(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		counted := &countingRedis{Client: r.client(t)}
		q, _ := runQueueOn(t, counted, r.queueOptions(Options{BucketSize: 1, BucketName: "dq_bucket_%d",
			QueueName: "dq_queue_%s", BlockTimeout: time.Minute}), redistest.Logger(t))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go q.Pop(ctx, []string{"held"}, 30*time.Second)
		held := q.waiters.loopOf("held")
		loop := q.partitions[0].loops[held]
		redistest.WaitFor(t, 10*time.Second, "the loop blocked for the held pop", func() bool {
			return loop.isBlocked() && !loop.behind()
		})

		// 200 waiters on new topics of that loop, then their 200 interrupts.
		var waiters []*waiter
		for i := 0; len(waiters) < 200; i++ {
			if topic := fmt.Sprintf("new-%d", i); q.waiters.loopOf(topic) == held {
				w := &waiter{topics: []string{topic}, count: 1, result: make(chan popResult, 1)}
				q.waiters.add(w, false)
				waiters = append(waiters, w)
			}
		}
		// The loop's interrupts are the calls on its control list.
		before := counted.callsOn(loop.control)
		var wg sync.WaitGroup
		for range waiters {
			wg.Go(loop.interrupt)
		}
		wg.Wait()
		if calls := counted.callsOn(loop.control) - before; calls > 3 {
			t.Errorf("200 interrupts of one loop made %d Redis calls, want a few", calls)
		}
		// One after the other, as a loaded machine runs them: one token per
		// wait, however slowly the loop wakes.
		w := &waiter{topics: []string{waiters[0].topics[0] + "-again"}, count: 1, result: make(chan popResult, 1)}
		for i := 0; q.waiters.loopOf(w.topics[0]) != held; i++ {
			w.topics[0] = fmt.Sprintf("again-%d", i)
		}
		q.waiters.add(w, false)
		waiters = append(waiters, w)
		before = counted.callsOn(loop.control)
		for range 200 {
			loop.interrupt()
		}
		if calls := counted.callsOn(loop.control) - before; calls > 3 {
			t.Errorf("200 interrupts one after the other made %d Redis calls, want a few", calls)
		}
		last := waiters[len(waiters)-1]
		mustPush(t, q, Job{Topic: last.topics[0], ID: "after-interrupts", TTR: time.Minute})
		select {
		case res := <-last.result:
			if len(res.deliveries) != 1 || res.deliveries[0].ID != "after-interrupts" {
				t.Fatalf("the last waiter got %+v", res)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the loop did not serve a topic added before the interrupts")
		}
		before = counted.callsOn(loop.control)
		for range 50 {
			wg.Go(loop.interrupt)
		}
		wg.Wait()
		if calls := counted.callsOn(loop.control) - before; calls != 0 {
			t.Errorf("50 interrupts of a loop that listens to all its topics made %d Redis calls", calls)
		}
		for _, w := range waiters {
			q.waiters.giveUp(w)
		}
	})
}
