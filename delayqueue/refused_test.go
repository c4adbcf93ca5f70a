package delayqueue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// A claim that Redis refuses half-way (an ACL user denied one of the
// commands claim.lua sends; Redis keeps a failed script's earlier writes)
// loses no job: its writes are ordered so that the job is still ready, or
// reserved with its lease, and a consumer gets it. Denying HSET stops the
// call before the record is written (the job stays ready); denying ZREM
// stops it after (the job is reserved and comes back when its lease ends).
// On one server, with an ACL user of its own.
func TestClaimRefusedHalfWayLosesNoJob(t *testing.T) {
	t.Parallel()
	cases := []struct {
		denied string
		within time.Duration // until the job is delivered again
	}{
		{"hset", 2 * time.Second},
		{"zrem", 10 * time.Second},
	}
	for _, c := range cases {
		t.Run(c.denied, func(t *testing.T) {
			t.Parallel()
			addr, ro := serverDenying(t, c.denied)
			opts := Options{BucketSize: 1, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s", BlockTimeout: 30 * time.Second}
			q := startQueue(t, testRedisOptions(addr), opts, redistest.Logger(t))
			mustPush(t, q, Job{Topic: "half", ID: "j1", TTR: time.Second, Body: "b"})

			// The refused consumer: its queue is not run (its scanner
			// would be refused too), so it only claims.
			logger := redistest.Logger(t)
			refused := unrunQueue(t, newClient(t, ro, logger), opts, logger)
			ctx := context.Background()
			if d, err := refused.Pop(ctx, []string{"half"}, 0); err == nil {
				t.Fatalf("a pop denied %s = %v, nil; want its error", c.denied, d)
			}

			d, err := q.Pop(ctx, []string{"half"}, c.within)
			if err != nil || d == nil || d.ID != "j1" || d.Body != "b" {
				t.Fatalf("pop after the refused claim = %+v, %v; want job j1 within %v", d, err, c.within)
			}
			if err := q.Finish(ctx, d.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A move of due jobs that Redis refuses half-way loses no job either: the
// job stays delayed and findable by the scanner (its timer kept), or it is
// ready. Denying ZADD stops movedue.lua before it writes anything (the
// job's ready entry comes first); denying ZREM stops it after that, before
// the delayed entry goes. The job is pushed by a queue stopped before
// it is due, the refused move runs alone, and then a queue of the full
// user must deliver it.
func TestMoveDueRefusedHalfWayLosesNoJob(t *testing.T) {
	t.Parallel()
	for _, denied := range []string{"zadd", "zrem"} {
		t.Run(denied, func(t *testing.T) {
			t.Parallel()
			addr, ro := serverDenying(t, denied)
			opts := Options{BucketSize: 1, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s", BlockTimeout: 30 * time.Second}
			logger := redistest.Logger(t)
			ctx := context.Background()

			// The pusher runs only until the push is done: its scanner must
			// not move the job, due two seconds later.
			pusher, stopPusher := runQueue(t, testRedisOptions(addr), opts, logger)
			mustPush(t, pusher, Job{Topic: "half", ID: "j1", Delay: 2 * time.Second, Body: "b"})
			stopPusher()
			if j, err := pusher.Get(ctx, "j1"); err != nil || j.State != StateDelay {
				t.Fatalf("after the pusher stopped: %+v, %v; want j1 still delayed", j, err)
			}

			refused := unrunQueue(t, newClient(t, ro, logger), opts, logger)
			s := newScanner(refused, refused.partitions[0])
			// Until j1 is due the call writes nothing, and Redis refuses nothing.
			redistest.WaitFor(t, 10*time.Second, "the refused move of j1", func() bool {
				_, err := s.moveDue(ctx)
				return err != nil
			})

			q := startQueue(t, testRedisOptions(addr), opts, logger)
			d, err := q.Pop(ctx, []string{"half"}, 10*time.Second)
			if err != nil || d == nil || d.ID != "j1" || d.Body != "b" {
				t.Fatalf("pop after the refused move = %+v, %v; want job j1", d, err)
			}
			if err := q.Finish(ctx, d.ID); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// queueOnOwnServer runs a queue of one partition on a redis-server of its
// own, and returns it with a function that sets the server's maxmemory
// ("1": every write that needs memory is refused; "0": no limit).
func queueOnOwnServer(t *testing.T) (*Queue, func(bytes string)) {
	t.Helper()
	srv := redistest.Start(t)
	q := startQueue(t, testRedisOptions(srv.Addr), Options{BucketSize: 1, BucketName: "dq_bucket_%d",
		QueueName: "dq_queue_%s", BlockTimeout: 30 * time.Second}, redistest.Logger(t))
	admin, err := redis.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return q, func(bytes string) {
		t.Helper()
		if _, err := admin.Do("CONFIG", "SET", "maxmemory", bytes); err != nil {
			t.Fatalf("CONFIG SET maxmemory %s: %v", bytes, err)
		}
	}
}

// Redis out of memory (maxmemory with the noeviction policy) refuses a
// push with an error that says so (ErrRedisFull), not a bare script error;
// nothing is stored and the jobs already there are intact; once memory is
// raised, the same push goes through. On a server of its own, whose limit
// the test sets.
func TestPushRefusedWhileRedisIsOutOfMemory(t *testing.T) {
	t.Parallel()
	q, setMaxMemory := queueOnOwnServer(t)
	mustPush(t, q, Job{Topic: "oom", ID: "kept", Delay: time.Hour})

	setMaxMemory("1") // every write that needs memory is refused
	ctx := context.Background()
	job := Job{Topic: "oom", ID: "new", TTR: 30 * time.Second, Body: "b"}
	if _, err := q.Push(ctx, job); !errors.Is(err, ErrRedisFull) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("push while Redis is full = %v, want ErrRedisFull", err)
	}
	results, err := q.PushBatch(ctx, []Job{job})
	if !errors.Is(err, ErrRedisFull) || results != nil {
		t.Fatalf("batch push while Redis is full = %+v, %v; want no results and ErrRedisFull", results, err)
	}
	setMaxMemory("0")
	if info, err := q.Get(ctx, "new"); !errors.Is(err, ErrNotFound) && (err != nil || info != nil) {
		t.Fatalf("refused job: %+v, %v; want it not stored", info, err)
	}
	if info, err := q.Get(ctx, "kept"); err != nil || info == nil || info.State != StateDelay {
		t.Fatalf("job stored before: %+v, %v; want it delayed as it was", info, err)
	}
	mustPush(t, q, job)
	if d := mustPop(t, q, 0, "oom"); d == nil || d.ID != "new" {
		t.Fatalf("pop after memory was raised = %+v, want new", d)
	}
}
