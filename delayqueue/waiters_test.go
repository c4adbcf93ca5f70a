package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// A topic stays listened to while its only waiter is checked out, so that
// a fruitless claim gives the waiter back without changing any loop's
// topics (which would interrupt that loop's BLPOP on every partition); it
// goes once its last waiter is served or has left.
func TestWaiterRegistryKeepsTopicsDuringAClaim(t *testing.T) {
	errClaim := errors.New("claim failed")
	for _, tc := range []struct {
		name string
		// end ends the checkout of w, whose Pop stopped waiting when
		// abandoned.
		end       func(r *waiterRegistry, w *waiter) []int
		abandoned bool
		// kept: the topics are still listened to afterwards.
		kept bool
		want popResult
	}{
		{"fruitless claim", func(r *waiterRegistry, w *waiter) []int { return r.checkin(w, nil) }, false, true, popResult{}},
		{"jobs handed out", func(r *waiterRegistry, w *waiter) []int {
			r.handOut(w, []*Delivery{{ID: "j"}})
			return nil
		}, false, false, popResult{deliveries: []*Delivery{{ID: "j"}}}},
		{"pop gone during the claim", func(r *waiterRegistry, w *waiter) []int { return r.checkin(w, errClaim) }, true, false,
			popResult{err: errClaim}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWaiterRegistry(4)
			w := &waiter{topics: []string{"a", "b"}, count: 1, result: make(chan popResult, 1)}
			loops := r.add(w, false)
			if len(loops) == 0 {
				t.Fatal("the first waiter of two topics gave no loop a topic")
			}
			listened := func() []string {
				var all []string
				for i := range r.loopTopics {
					topics, _, _ := r.topicsOf(i, 0)
					all = append(all, topics...)
				}
				slices.Sort(all)
				return all
			}
			versions := make([]uint64, len(r.loopTopics))
			for i := range versions {
				_, versions[i], _ = r.topicsOf(i, 0)
			}
			if ws := r.checkout("a", 1); len(ws) != 1 || ws[0] != w {
				t.Fatalf("checkout = %v, want the waiter", ws)
			}
			if got := listened(); !slices.Equal(got, []string{"a", "b"}) {
				t.Fatalf("topics listened to during the claim = %v, want [a b]", got)
			}
			if r.anyWaiting([]string{"a"}) {
				t.Error("a checked-out waiter counts as queued: a new Pop would wait behind it")
			}
			if tc.abandoned && r.giveUp(w) {
				t.Fatal("giveUp of a checked-out waiter said it was still queued")
			}
			if newLoops := tc.end(r, w); len(newLoops) != 0 {
				t.Errorf("loops that gained a topic = %v, want none (no BLPOP to interrupt)", newLoops)
			}
			want := []string{"a", "b"}
			if !tc.kept {
				want = nil
			}
			if got := listened(); !slices.Equal(got, want) {
				t.Errorf("topics listened to afterwards = %v, want %v", got, want)
			}
			for i, v := range versions {
				// A loop rebuilds its BLPOP's keys only when its version moved:
				// after a fruitless claim none did; once the waiter is gone,
				// those of its topics did.
				_, _, changed := r.topicsOf(i, v)
				serves := i == r.loopOf("a") || i == r.loopOf("b")
				if want := serves && !tc.kept; changed != want {
					t.Errorf("loop %d's topics changed: %v, want %v", i, changed, want)
				}
			}
			if len(r.claiming) != 0 {
				t.Errorf("checkouts still counted: %v", r.claiming)
			}
			select {
			case got := <-w.result:
				if tc.want.err == nil && len(tc.want.deliveries) == 0 {
					t.Errorf("the waiter given back was sent %+v", got)
				}
				if !errors.Is(got.err, tc.want.err) || len(got.deliveries) != len(tc.want.deliveries) {
					t.Errorf("result = %+v, want %+v", got, tc.want)
				}
			default:
				if tc.want.err != nil || len(tc.want.deliveries) > 0 {
					t.Errorf("no result sent, want %+v", tc.want)
				}
			}
			if tc.kept {
				// Queued again at the front: the next checkout finds it, and
				// serving it drops the topics.
				if ws := r.checkout("b", 1); len(ws) != 1 || ws[0] != w {
					t.Fatalf("checkout after checkin = %v, want the waiter", ws)
				}
				r.handOut(w, []*Delivery{{ID: "j"}})
				if got := listened(); len(got) != 0 {
					t.Errorf("topics listened to after the waiter was served = %v, want none", got)
				}
			}
		})
	}
}

// A Pop whose hold ends just as a dispatch loop hands it jobs must take
// them: giveUp after handOut (or after a checkin that told an abandoned
// waiter) says the waiter is no longer queued, so that its Pop reads the
// result, rather than leaving the claimed jobs in the channel until their
// ttr.
func TestWaiterGiveUpAfterItsCheckoutEnded(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(r *waiterRegistry, w *waiter)
		want int // deliveries the result carries
	}{
		{"jobs handed out", func(r *waiterRegistry, w *waiter) { r.handOut(w, []*Delivery{{ID: "j"}}) }, 1},
		{"queued again after a fruitless claim", func(r *waiterRegistry, w *waiter) { r.checkin(w, nil) }, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newWaiterRegistry(2)
			w := &waiter{topics: []string{"a"}, count: 1, result: make(chan popResult, 1)}
			r.add(w, false)
			if ws := r.checkout("a", 1); len(ws) != 1 || ws[0] != w {
				t.Fatalf("checkout = %v, want the waiter", ws)
			}
			tc.end(r, w)
			queued := r.giveUp(w)
			if tc.want < 0 {
				// Checked in: queued again, so giveUp removes it and no
				// result comes.
				if !queued {
					t.Fatal("giveUp of a waiter queued again said a result would come")
				}
				if r.anyWaiting([]string{"a"}) {
					t.Error("the waiter is still queued after giveUp")
				}
				return
			}
			if queued {
				t.Fatal("giveUp after the jobs were handed out said the waiter was still queued: its Pop would drop them")
			}
			select {
			case got := <-w.result:
				if len(got.deliveries) != tc.want {
					t.Errorf("result = %+v, want %d deliveries", got, tc.want)
				}
			default:
				t.Error("no result for the Pop to read")
			}
		})
	}
}

// A dispatch loop's safety net reads which of its topics have ready jobs:
// a topic with a ready job counts, one with only a ready webhook job (in
// the counters, but never popped) or with none does not.
func TestLoopReadyTopics(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		p := q.partitions[0]
		jobs := []Job{
			{Topic: "rt-ready", ID: idIn(q, p, "r"), TTR: time.Minute},
			{Topic: "rt-hook", ID: idIn(q, p, "h"), Callback: &Callback{URL: "http://127.0.0.1:9/"}},
			{Topic: "rt-later", ID: idIn(q, p, "l"), TTR: time.Minute, Delay: time.Hour},
		}
		for _, j := range jobs {
			if _, err := q.Push(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		got, err := p.loops[0].readyTopics(ctx, []string{"rt-none", "rt-hook", "rt-later", "rt-ready"})
		if err != nil || !slices.Equal(got, []string{"rt-ready"}) {
			t.Fatalf("readyTopics = %v, %v; want [rt-ready]", got, err)
		}
	})
}

// A wake-up token given back (a dispatch loop's waiters left) or left
// after a call (signal.lua) is kept only while the topic has ready jobs in
// the partition: one left for none would wake held pops for nothing, and
// keep the wake-up list in Redis after the topic's last job until it
// expires. (Not run, so that no dispatch loop takes the tokens.)
func TestTokensAreLeftOnlyForReadyJobs(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := unrunQueueOn(t, r, 1)
		p := q.partitions[0]
		steps := []struct {
			name string
			do   func()
			want int
		}{
			{"given back with no job", func() {}, 0},
			{"given back with a ready job (the push left one)", func() { mustPush(t, q, Job{Topic: "tk", ID: "a", TTR: time.Minute}) }, 2},
			{"given back after the job was popped", func() {
				if d := mustPop(t, q, 0, "tk"); d == nil || d.ID != "a" {
					t.Fatalf("pop = %+v, want a", d)
				}
			}, 0},
		}
		for _, step := range steps {
			step.do()
			p.loops[0].returnToken("tk")
			if n := wakeTokens(t, q, p, "tk"); n != step.want {
				t.Errorf("%s: the wake-up list holds %d tokens, want %d", step.name, n, step.want)
			}
		}
	})
}

// idIn is the first id "<prefix>-<n>" that falls in partition p.
func idIn(q *Queue, p *partition, prefix string) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("%s-%d", prefix, i); q.partitionOf(id) == p {
			return id
		}
	}
}

// blpopTimeoutCounter counts the BLPOPs of the dispatch loops' own
// connections that timed out (a nil reply).
type blpopTimeoutCounter struct {
	*redisconn.Client
	timeouts atomic.Int64
}

func (c *blpopTimeoutCounter) Dial(ctx context.Context, key string) (redis.Conn, error) {
	conn, err := c.Client.Dial(ctx, key)
	if err != nil {
		return nil, err
	}
	return &blpopTimeoutConn{Conn: conn, timeouts: &c.timeouts}, nil
}

type blpopTimeoutConn struct {
	redis.Conn
	timeouts *atomic.Int64
}

func (c *blpopTimeoutConn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	reply, err := redis.DoWithTimeout(c.Conn, timeout, cmd, args...)
	if cmd == "BLPOP" && err == nil && reply == nil {
		c.timeouts.Add(1)
	}
	return reply, err
}

func (c *blpopTimeoutConn) ReceiveWithTimeout(timeout time.Duration) (any, error) {
	return redis.ReceiveWithTimeout(c.Conn, timeout)
}

// A dispatch loop that waits for callback jobs only (a webhook dispatcher
// of this process waits, no pop is held) and sees its BLPOP time out, as on
// any idle server, has completed a round: no loop error is counted or
// logged, and the dispatcher is not behind.
func TestIdleDispatchLoopListeningForCallbacksIsNoFailure(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		counter := &blpopTimeoutCounter{Client: r.client(t)}
		logs := newRecordedLog(t)
		obs := &recordingObserver{counts: map[string]int{}}
		q, _ := runQueueOn(t, counter, r.queueOptions(Options{BucketSize: 1, BucketName: "dq_bucket_%d",
			QueueName: "dq_queue_%s", BlockTimeout: 30 * time.Second, Observer: obs}), slog.New(logs))

		ctx, cancel := context.WithCancel(context.Background())
		waited := make(chan struct{})
		go func() {
			defer close(waited)
			for ctx.Err() == nil {
				q.WaitCallbacks(ctx, time.Minute)
			}
		}()
		defer func() {
			cancel()
			<-waited
		}()
		redistest.WaitFor(t, 15*time.Second, "two BLPOP timeouts of the dispatch loop", func() bool {
			return counter.timeouts.Load() >= 2
		})
		if n := obs.get("loop-error/" + LoopDispatcher); n != 0 {
			t.Errorf("dispatcher errors counted: %d, want 0", n)
		}
		if lines := logs.lines(slog.LevelError); len(lines) != 0 {
			t.Errorf("error lines logged:\n%s", strings.Join(lines, "\n"))
		}
		for _, s := range q.LoopHealth() {
			if s.Loop == LoopDispatcher && s.Behind > 5*time.Second {
				t.Errorf("dispatcher %v behind after rounds that timed out", s.Behind)
			}
		}
	})
}

// A dispatch loop whose BLPOP its slot's move to another primary unblocks
// (MOVED) waits on the new owner: the move is no Redis outage and no
// failed round, and the held pop is served from there. On a cluster of its
// own: it moves a slot.
func TestDispatchLoopFollowsItsMovedSlot(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	obs := &recordingObserver{counts: map[string]int{}}
	q := newTestQueue(t, onCluster(c), func(o *Options) { o.BucketSize = 1; o.Observer = obs })
	p := q.partitions[0]
	slot := redisconn.Slot(p.key())
	source := c.SlotOwner(t, slot)
	var target string
	for _, addr := range c.Primaries(t) {
		if addr != source {
			target = addr
			break
		}
	}
	blpopOn := func(addr string) bool {
		list, err := redis.String(c.Node(addr).Do("CLIENT", "LIST"))
		return err == nil && strings.Contains(list, "cmd=blpop")
	}

	popped := holdPop(t, q, "moved")
	redistest.WaitFor(t, 10*time.Second, "a dispatch loop's BLPOP on "+source, func() bool { return blpopOn(source) })
	c.MigrateSlot(t, slot, target)
	redistest.WaitFor(t, 10*time.Second, "a dispatch loop's BLPOP on "+target, func() bool { return blpopOn(target) })

	mustPush(t, q, Job{Topic: "moved", ID: "after-the-move"})
	wantServedWithoutErrors(t, popped, "after-the-move", "the move", obs)
}

// holdPop starts a held pop of topic and returns where its delivery comes.
func holdPop(t *testing.T, q *Queue, topic string) <-chan *Delivery {
	t.Helper()
	popped := make(chan *Delivery, 1)
	go func() {
		d, err := q.Pop(context.Background(), []string{topic}, 20*time.Second)
		if err != nil {
			t.Errorf("held pop: %v", err)
		}
		popped <- d
	}()
	return popped
}

// wantServedWithoutErrors checks that a held pop got job id after what
// happened to its dispatch loop, and that what counted no Redis error and
// no failed round of a dispatcher.
func wantServedWithoutErrors(t *testing.T, popped <-chan *Delivery, id, what string, obs *recordingObserver) {
	t.Helper()
	select {
	case d := <-popped:
		if d == nil || d.ID != id {
			t.Fatalf("held pop = %+v, want %s", d, id)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the held pop was not served after %s", what)
	}
	if n := obs.get("redis-error/"); n != 0 {
		t.Errorf("%s counted %d redis errors, want none", what, n)
	}
	if n := obs.get("loop-error/" + LoopDispatcher); n != 0 {
		t.Errorf("%s counted %d dispatcher errors, want none", what, n)
	}
}

// A dispatch loop whose BLPOP Redis ends with UNBLOCKED (its primary became
// a replica in a failover asked for; here CLIENT UNBLOCK ... ERROR, which
// answers the same) waits again: no Redis outage, no failed round, and the
// held pop is served.
func TestDispatchLoopWaitsAgainWhenUnblocked(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	obs := &recordingObserver{counts: map[string]int{}}
	q := newTestQueue(t, onServer(srv.Addr), func(o *Options) { o.BucketSize = 1; o.Observer = obs })
	admin, err := redis.Dial("tcp", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	blpopClient := func() string {
		list, err := redis.String(admin.Do("CLIENT", "LIST"))
		if err != nil {
			return ""
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, "cmd=blpop") {
				id, _, _ := strings.Cut(strings.TrimPrefix(line, "id="), " ")
				return id
			}
		}
		return ""
	}
	popped := holdPop(t, q, "unblocked")
	var first string
	redistest.WaitFor(t, 10*time.Second, "a dispatch loop's BLPOP", func() bool { first = blpopClient(); return first != "" })
	if n, err := redis.Int(admin.Do("CLIENT", "UNBLOCK", first, "ERROR")); err != nil || n != 1 {
		t.Fatalf("CLIENT UNBLOCK = %d, %v", n, err)
	}
	redistest.WaitFor(t, 10*time.Second, "the loop's BLPOP again", func() bool {
		id := blpopClient()
		return id != "" && id != first
	})
	mustPush(t, q, Job{Topic: "unblocked", ID: "after-the-unblock"})
	wantServedWithoutErrors(t, popped, "after-the-unblock", "the unblock", obs)
}
