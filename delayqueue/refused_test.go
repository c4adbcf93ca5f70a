package delayqueue

import (
	"context"
	"testing"
	"time"

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
// ready. Denying HSET stops movedue.lua before the record is written;
// denying ZREM stops it after. The job is pushed by a queue stopped before
// it is due, the refused move runs alone, and then a queue of the full
// user must deliver it.
func TestMoveDueRefusedHalfWayLosesNoJob(t *testing.T) {
	t.Parallel()
	for _, denied := range []string{"hset", "zrem"} {
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
