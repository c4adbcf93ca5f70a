package delayqueue

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// commandCalls reads the calls of each command from c's INFO commandstats
// (lower-case names: "fcall", "evalsha").
func commandCalls(t *testing.T, c redis.Conn) map[string]int {
	t.Helper()
	info, err := redis.String(c.Do("INFO", "commandstats"))
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[strings.TrimPrefix(name, "cmdstat_")], _ = strconv.Atoi(n)
	}
	return calls
}

// hasLibrary reports whether c's Redis holds the queue's function library.
func hasLibrary(t *testing.T, c redis.Conn, q *Queue) bool {
	t.Helper()
	libs, err := redis.Values(c.Do("FUNCTION", "LIST", "LIBRARYNAME", q.scripts.lib.name))
	if err != nil {
		t.Fatalf("FUNCTION LIST: %v", err)
	}
	return len(libs) > 0
}

// lifecycleOnce pushes a delayed job and a ready one, pops, finishes and
// reads them, checking each answer.
func lifecycleOnce(t *testing.T, q *Queue, topic string) {
	t.Helper()
	ctx := context.Background()
	mustPush(t, q, Job{Topic: topic, ID: topic + "-due", Delay: 100 * time.Millisecond, Body: "d"})
	mustPush(t, q, Job{Topic: topic, ID: topic + "-now", Body: "n"})
	got := map[string]string{}
	for len(got) < 2 {
		d := mustPop(t, q, 5*time.Second, topic)
		if d == nil {
			t.Fatalf("pop: no job, after %v", got)
		}
		got[d.ID] = d.Body
		if info, err := q.Get(ctx, d.ID); err != nil || info == nil || info.State != StateReserved {
			t.Fatalf("get %s while held = %+v, %v; want reserved", d.ID, info, err)
		}
		if err := q.Finish(ctx, d.ID); err != nil {
			t.Fatalf("finish %s: %v", d.ID, err)
		}
	}
	if got[topic+"-due"] != "d" || got[topic+"-now"] != "n" {
		t.Fatalf("popped %v", got)
	}
	for id := range got {
		if info, err := q.Get(ctx, id); !gone(info, err) {
			t.Fatalf("get %s after finish = %+v, %v; want no job", id, info, err)
		}
	}
}

// gone reports whether Get's answer says there is no such job.
func gone(info *JobInfo, err error) bool {
	return errors.Is(err, ErrNotFound) || err == nil && info == nil
}

// Where Redis has functions, the partition scripts run as functions of one
// library (FCALL, not EVALSHA), loaded on every primary that holds a
// partition before the first call.
func TestScriptsRunAsFunctions(t *testing.T) {
	t.Parallel()
	t.Run("server", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		q := startQueue(t, testRedisOptions(srv.Addr), Options{BucketSize: 3, BucketName: "dq_bucket_%d",
			QueueName: "dq_queue_%s", BlockTimeout: 30 * time.Second}, redistest.Logger(t))
		admin := dialAdmin(t, srv.Addr)
		if !hasLibrary(t, admin, q) {
			t.Fatal("the library is not loaded once the queue serves")
		}
		before := commandCalls(t, admin)
		lifecycleOnce(t, q, "fn")
		after := commandCalls(t, admin)
		// push 2, claim 2, finish 2 and the scanner's moves at least.
		if calls := after["fcall"] - before["fcall"]; calls < 6 {
			t.Errorf("FCALL calls during the jobs' lives: %d, want at least 6", calls)
		}
		if calls := after["evalsha"] + after["eval"]; calls != 0 {
			t.Errorf("EVALSHA and EVAL calls: %d, want none", calls)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		runOn(t, []redistest.Backend{sharedCluster.Backend()}, func(t *testing.T, r *testRedis) {
			q := startQueue(t, r.opts, r.queueOptions(Options{BucketSize: 12, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
				BlockTimeout: 30 * time.Second, Cluster: true}), redistest.Logger(t))
			for _, addr := range r.primaries(t) {
				c := r.dialPrimary(t, addr)
				if !hasLibrary(t, c, q) {
					t.Errorf("primary %s lacks the library once the queue serves", addr)
				}
				c.Close()
			}
			lifecycleOnce(t, q, "fn")
		})
	})
}

func dialAdmin(t *testing.T, addr string) redis.Conn {
	t.Helper()
	c, err := redis.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// A Redis that lost the library under a running queue (FUNCTION FLUSH, a
// restart without persistence) gets it again from the next call, which
// succeeds; a readiness check loads it too.
func TestLostLibraryIsLoadedAgain(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	q := startQueue(t, testRedisOptions(srv.Addr), Options{BucketSize: 1, BucketName: "dq_bucket_%d",
		QueueName: "dq_queue_%s", BlockTimeout: 30 * time.Second}, redistest.Logger(t))
	admin := dialAdmin(t, srv.Addr)
	flush := func() {
		t.Helper()
		if _, err := admin.Do("FUNCTION", "FLUSH"); err != nil {
			t.Fatalf("FUNCTION FLUSH: %v", err)
		}
		if hasLibrary(t, admin, q) {
			t.Fatal("the library is still there after FUNCTION FLUSH")
		}
	}
	flush()
	lifecycleOnce(t, q, "lost")
	if !hasLibrary(t, admin, q) {
		t.Fatal("the library was not loaded again by the calls")
	}
	flush()
	if err := q.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if !hasLibrary(t, admin, q) {
		t.Fatal("Ready did not load the library again")
	}
	if calls := commandCalls(t, admin); calls["evalsha"]+calls["eval"] != 0 {
		t.Errorf("EVALSHA and EVAL calls: %d, want none", calls["evalsha"]+calls["eval"])
	}
}

// An ACL user that may not call or load functions (one made for an
// earlier release, which named EVALSHA and EVAL only), and a Redis without
// them (miniredis, as in the embedded mode), still run the queue: the
// scripts go as scripts of their own, and the server says so once, at
// info level, in a line of reasonable length.
func TestScriptsWithoutFunctions(t *testing.T) {
	t.Parallel()
	for _, refused := range []string{"fcall", "function", "miniredis"} {
		t.Run(refused, func(t *testing.T) {
			t.Parallel()
			var addr string
			var ro redisconn.Options
			if refused == "miniredis" {
				addr = redistest.Mini(t).Addr()
				ro = testRedisOptions(addr)
			} else {
				addr, ro = serverDenying(t, refused)
			}
			logs := newRecordedLog(t)
			q := startQueue(t, ro, Options{BucketSize: 3, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
				BlockTimeout: 30 * time.Second}, slog.New(logs))
			lifecycleOnce(t, q, "eval")
			if err := q.Ready(context.Background()); err != nil {
				t.Fatalf("Ready: %v", err)
			}
			if refused != "miniredis" {
				calls := commandCalls(t, dialAdmin(t, addr))
				if calls["evalsha"] < 6 {
					t.Errorf("EVALSHA calls: %d, want at least 6", calls["evalsha"])
				}
				if calls["fcall"] > 1 {
					t.Errorf("FCALL calls: %d, want at most the one refused", calls["fcall"])
				}
			}
			said := 0
			for _, line := range logs.lines(slog.LevelInfo) {
				if strings.Contains(line, "scripts are sent with EVALSHA") {
					said++
					if len(line) > 500 {
						t.Errorf("the switch to EVALSHA is logged in %d bytes:\n%.600s", len(line), line)
					}
				}
			}
			if said != 1 {
				t.Errorf("the switch to EVALSHA was logged %d times, want once:\n%s", said, strings.Join(logs.lines(slog.LevelInfo), "\n"))
			}
			if errs := logs.lines(slog.LevelError); len(errs) > 0 {
				t.Errorf("errors logged:\n%s", strings.Join(errs, "\n"))
			}
		})
	}
}

// A full Redis (maxmemory with noeviction) refuses new jobs but still lets
// consumers drain it: jobs come due and pop, and consumers finish and
// delete them, which frees memory; and they can be read.
func TestConsumersDrainAFullRedis(t *testing.T) {
	t.Parallel()
	q, setMaxMemory := queueOnOwnServer(t)
	ctx := context.Background()
	mustPush(t, q, Job{Topic: "oom", ID: "held"})
	mustPush(t, q, Job{Topic: "oom", ID: "waiting", Delay: time.Hour})
	if d := mustPop(t, q, 0, "oom"); d == nil || d.ID != "held" {
		t.Fatalf("pop = %+v, want held", d)
	}
	mustPush(t, q, Job{Topic: "oom", ID: "ready"})
	mustPush(t, q, Job{Topic: "oom", ID: "due", Delay: 300 * time.Millisecond})

	setMaxMemory("1")
	if _, err := q.Push(ctx, Job{Topic: "oom", ID: "new", TTR: 30 * time.Second}); !errors.Is(err, ErrRedisFull) {
		t.Fatalf("push while Redis is full = %v, want ErrRedisFull", err)
	}
	if info, err := q.Get(ctx, "waiting"); err != nil || info == nil || info.State != StateDelay {
		t.Fatalf("get while Redis is full = %+v, %v; want the delayed job", info, err)
	}
	for _, want := range []string{"ready", "due"} {
		d, err := q.Pop(ctx, []string{"oom"}, 5*time.Second)
		if err != nil || d == nil || d.ID != want {
			t.Fatalf("pop while Redis is full = %+v, %v; want %s", d, err, want)
		}
		if err := q.Finish(ctx, d.ID); err != nil {
			t.Fatalf("finish %s while Redis is full: %v", d.ID, err)
		}
	}
	if err := q.Finish(ctx, "held"); err != nil {
		t.Fatalf("finish while Redis is full: %v", err)
	}
	if err := q.Delete(ctx, "waiting"); err != nil {
		t.Fatalf("delete while Redis is full: %v", err)
	}
	setMaxMemory("0")
	for _, id := range []string{"held", "waiting", "new", "ready", "due"} {
		if info, err := q.Get(ctx, id); !gone(info, err) {
			t.Errorf("get %s = %+v, %v; want no job", id, info, err)
		}
	}
}
