package delayqueue

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// inPlaceOptions is one partition, so that the order of pops is the
// partition's order.
func inPlaceOptions(r *testRedis) Options {
	return r.queueOptions(Options{BucketSize: 1, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: 30 * time.Second})
}

// scanUntilReady runs scanner passes until id reads as ready.
func scanUntilReady(t *testing.T, q *Queue, id string) {
	t.Helper()
	redistest.WaitFor(t, 10*time.Second, id+" ready", func() bool {
		scanAll(t, q)
		info, err := q.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return info != nil && info.State == StateReady
	})
}

func wantStats(t *testing.T, q *Queue, topic string, want TopicStats) {
	t.Helper()
	stats, err := q.Stats(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if stats[topic] != want {
		t.Fatalf("stats of %s = %+v, want %+v", topic, stats[topic], want)
	}
}

// A delayed job's entry moves to ready as it is when it is due, its record
// untouched: every call that reads the record must see it as ready, and
// its place in the order is its due time.
func TestDueJobMovedWithoutItsRecord(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		q := unrunQueue(t, r.client(t), inPlaceOptions(r), redistest.Logger(t))
		for _, id := range []string{"first", "gone", "replaced", "finished"} {
			mustPush(t, q, Job{Topic: "moved", ID: id, Delay: 10 * time.Millisecond, Body: "b-" + id})
		}
		scanUntilReady(t, q, "finished")
		for _, id := range []string{"first", "gone", "replaced"} {
			if info, _ := q.Get(ctx, id); info == nil || info.State != StateReady {
				t.Fatalf("get %s = %+v, want ready", id, info)
			}
		}
		wantStats(t, q, "moved", TopicStats{Ready: 4})
		// Pushed after the four were due: it comes after them.
		mustPush(t, q, Job{Topic: "moved", ID: "later", Body: "b-later"})

		if err := q.Delete(ctx, "gone"); err != nil {
			t.Fatal(err)
		}
		if err := q.Finish(ctx, "finished"); err != nil {
			t.Fatal(err)
		}
		// Replaced by a delayed job: out of ready, in delayed once.
		if res, err := q.Push(ctx, Job{Topic: "moved", ID: "replaced", Delay: time.Hour, TTR: time.Minute}); err != nil || res.Status != PushReplaced {
			t.Fatalf("replace = %+v, %v", res, err)
		}
		wantStats(t, q, "moved", TopicStats{Delay: 1, Ready: 2})

		var got []string
		for {
			d := mustPop(t, q, 0, "moved")
			if d == nil {
				break
			}
			if d.Body != "b-"+d.ID || d.Attempts != 1 {
				t.Fatalf("pop = %+v", d)
			}
			got = append(got, d.ID)
			if info, _ := q.Get(ctx, d.ID); info == nil || info.State != StateReserved {
				t.Fatalf("get %s after pop = %+v", d.ID, info)
			}
		}
		if fmt.Sprint(got) != "[first later]" {
			t.Fatalf("popped %v, want [first later]", got)
		}
		wantStats(t, q, "moved", TopicStats{Delay: 1, Reserved: 2})
		for _, id := range []string{"first", "later", "replaced"} {
			if err := q.Delete(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		wantStats(t, q, "moved", TopicStats{})
		assertNoTraces(t, r, "moved", "first", "gone", "replaced", "finished", "later")
	})
}

// Jobs stored by the release before due entries moved as they are keep
// working: their records and entries have the older form (no flag 4,
// 16-digit ready positions), and a due one is moved with its record.
func TestJobsOfTheEarlierRecordFormKeepWorking(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		q := unrunQueue(t, r.client(t), inPlaceOptions(r), redistest.Logger(t))
		p := q.partitions[0]
		now := time.Now().UnixMilli()
		past := now - 1000
		old := func(state, pos string, due int64, id string) string {
			body := "b-" + id
			return fmt.Sprintf("%s,0,%d,%s,0,3,0:old30,%d,0,0,0,%d:%s", state, due, pos, now-5000, len(body), body)
		}
		err := q.rdb.Do(ctx, p.key(), func(c redis.Conn) error {
			_ = c.Send("HSET", p.keyAt(keyJobs),
				"old-ready", old("ready", "0000000000000007", past, "old-ready"),
				"old-delayed", old("delay", fmt.Sprintf("%013d", past), past, "old-delayed"),
				"old-later", old("delay", fmt.Sprintf("%013d", now+3600_000), now+3600_000, "old-later"))
			_ = c.Send("ZADD", p.keyAt(keyReady), 0, "old,0000000000000007,old-ready")
			_ = c.Send("ZADD", p.keyAt(keyDelayed), 0, fmt.Sprintf("old,%013d,old-delayed", past),
				0, fmt.Sprintf("old,%013d,old-later", now+3600_000))
			_ = c.Send("ZADD", p.keyAt(keyTimers), past, "delay,old")
			_ = c.Send("HSET", p.keyAt(keyCounts), "ready,old", 1, "delay,old", 2, "seq", 64)
			_, err := c.Do("")
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		mustPush(t, q, Job{Topic: "old", ID: "new", Body: "b-new"})
		scanUntilReady(t, q, "old-delayed")
		wantStats(t, q, "old", TopicStats{Delay: 1, Ready: 3})
		if info, _ := q.Get(ctx, "old-later"); info == nil || info.State != StateDelay {
			t.Fatalf("get old-later = %+v", info)
		}

		var got []string
		for {
			d := mustPop(t, q, 0, "old")
			if d == nil {
				break
			}
			if d.Body != "b-"+d.ID || d.Attempts != 1 || d.TTR != 30*time.Second {
				t.Fatalf("pop = %+v", d)
			}
			got = append(got, d.ID)
		}
		// The older position sorts first; old-delayed became ready after
		// new was pushed.
		if fmt.Sprint(got) != "[old-ready new old-delayed]" {
			t.Fatalf("popped %v", got)
		}
		for _, id := range got {
			if err := q.Finish(ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Delete(ctx, "old-later"); err != nil {
			t.Fatal(err)
		}
		wantStats(t, q, "old", TopicStats{})
		assertNoTraces(t, r, "old-ready", "old-delayed", "old-later", "new")
	})
}
