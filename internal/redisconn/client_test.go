package redisconn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// clusterOptions are Options for a cluster with the given seeds and the
// test timeouts.
func clusterOptions(seeds ...string) Options {
	return Options{ClusterAddrs: seeds, MaxIdle: 4, ConnectTimeout: time.Second,
		ReadTimeout: 5 * time.Second, WriteTimeout: 2 * time.Second}
}

// newTestClient builds a cluster Client that refreshes its map only when
// asked (and at start), and closes it when the test ends.
func newTestClient(t *testing.T, seeds ...string) (*Client, *countingObserver) {
	t.Helper()
	obs := newCountingObserver()
	c, err := newClient(clusterOptions(seeds...), redistest.Logger(t), obs, time.Hour)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c, obs
}

// get runs GET key through c.Do.
func get(c *Client, key string) (string, error) {
	var v string
	err := c.Do(context.Background(), key, func(conn redis.Conn) error {
		var err error
		v, err = redis.String(conn.Do("GET", key))
		return err
	})
	return v, err
}

// count returns how many received commands start with prefix.
func count(commands []string, prefix string) int {
	n := 0
	for _, c := range commands {
		if strings.HasPrefix(c, prefix) {
			n++
		}
	}
	return n
}

func serveConstant(value string) func(*fakeSession, []string) string {
	return func(*fakeSession, []string) string { return respBulk(value) }
}

func TestOptionsForACluster(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		opts Options
		want string
	}{
		{"a database other than 0", Options{ClusterAddrs: []string{"127.0.0.1:1"}, DB: 1}, "database 0"},
		{"sentinels too", Options{ClusterAddrs: []string{"127.0.0.1:1"}, SentinelAddrs: []string{"127.0.0.1:2"}}, "exclusive"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.opts, nil, nil); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	if _, err := clusterOptions("127.0.0.1:1").Dial(); !errors.Is(err, errClusterDial) {
		t.Errorf("Options.Dial in cluster mode = %v, want errClusterDial", err)
	}
}

func TestNewAsksTheSeedsInTurn(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	a := fc.node(t, serveConstant("a"))
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	dead := fc.node(t, serveConstant("dead"))
	dead.stop()

	if _, err := newClient(clusterOptions(dead.addr), nil, nil, time.Hour); err == nil || !strings.Contains(err.Error(), dead.addr) {
		t.Fatalf("New with a dead seed only = %v, want an error naming it", err)
	}
	c, obs := newTestClient(t, dead.addr, a.addr)
	if v, err := get(c, "k"); err != nil || v != "a" {
		t.Fatalf("GET = %q, %v", v, err)
	}
	if got, err := c.Primaries(context.Background()); err != nil || !slices.Equal(got, []string{a.addr}) {
		t.Fatalf("Primaries = %v, %v; want [%s]", got, err, a.addr)
	}
	if obs.refreshed(true) != 1 {
		t.Errorf("map refreshes = %d, want the one at start", obs.refreshed(true))
	}
}

// A MOVED reply sends the call to the new owner at once, updates the map
// so later calls go there directly, and makes the client fetch the map.
func TestDoFollowsMoved(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	var movedTo atomic.Value
	movedTo.Store("")
	a := fc.node(t, func(_ *fakeSession, args []string) string {
		if to := movedTo.Load().(string); to != "" {
			return respErr(fmt.Sprintf("MOVED %d %s", Slot(args[1]), to))
		}
		return respBulk("a")
	})
	b := fc.node(t, serveConstant("b"))
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, obs := newTestClient(t, a.addr)

	if v, err := get(c, "k"); err != nil || v != "a" {
		t.Fatalf("GET before the move = %q, %v", v, err)
	}
	fc.setSlots(fakeRange{0, SlotCount - 1, b})
	movedTo.Store(b.addr)
	if v, err := get(c, "k"); err != nil || v != "b" {
		t.Fatalf("GET after the move = %q, %v; want b's answer", v, err)
	}
	if v, err := get(c, "k"); err != nil || v != "b" {
		t.Fatalf("second GET after the move = %q, %v", v, err)
	}
	if got := count(a.received(), "GET"); got != 2 {
		t.Errorf("a got %d GETs, want 2: after the MOVED the client goes to b directly", got)
	}
	if got := obs.redirected(RedirectMoved); got != 1 {
		t.Errorf("moved redirects = %d, want 1", got)
	}
	redistest.WaitFor(t, 5*time.Second, "the map to be fetched after the MOVED, and a's pool closed", func() bool {
		return obs.refreshed(true) >= 2 && a.openConns() == 0
	})
}

// An ASK reply sends the call once to the target, with ASKING before each
// of its commands (EVALSHA, then EVAL after NOSCRIPT), and leaves the map
// alone.
func TestDoFollowsAskOnce(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	var b *fakeNode
	var bAddr atomic.Value
	a := fc.node(t, func(_ *fakeSession, args []string) string {
		return respErr(fmt.Sprintf("ASK %d %s", Slot(args[len(args)-1]), bAddr.Load()))
	})
	b = fc.node(t, func(s *fakeSession, args []string) string {
		switch {
		case !s.asking:
			return respErr(fmt.Sprintf("MOVED %d %s", Slot("k"), a.addr))
		case args[0] == "EVALSHA":
			return respErr("NOSCRIPT No matching script.")
		default:
			return respBulk("b")
		}
	})
	bAddr.Store(b.addr)
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, obs := newTestClient(t, a.addr)

	if v, err := get(c, "k"); err != nil || v != "b" {
		t.Fatalf("GET = %q, %v; want b's answer", v, err)
	}
	script := redis.NewScript(1, "return 'b'")
	var v string
	err := c.Do(context.Background(), "k", func(conn redis.Conn) error {
		var err error
		v, err = redis.String(script.Do(conn, "k"))
		return err
	})
	if err != nil || v != "b" {
		t.Fatalf("script = %q, %v; want b's answer", v, err)
	}
	var onB []string
	for _, cmd := range b.received() {
		onB = append(onB, strings.Fields(cmd)[0])
	}
	if want := []string{"ASKING", "GET", "ASKING", "EVALSHA", "ASKING", "EVAL"}; !slices.Equal(onB, want) {
		t.Errorf("b received %v, want %v", onB, want)
	}
	if got := len(a.received()); got != 2 {
		t.Errorf("a received %d commands, want 2: an ASK does not change the map", got)
	}
	if got := obs.redirected(RedirectAsk); got != 2 {
		t.Errorf("ask redirects = %d, want 2", got)
	}
	if got := obs.redirected(RedirectMoved); got != 0 {
		t.Errorf("moved redirects = %d, want 0", got)
	}
}

// FCALL's "Function not found" and FUNCTION LOAD's reply say nothing ran:
// a call that loaded the library on a node and was then moved (the slot
// left that node meanwhile) runs again on the slot's new primary.
func TestDoFollowsMovedAfterLoadingAFunction(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	var b *fakeNode
	var loaded atomic.Bool
	a := fc.node(t, func(_ *fakeSession, args []string) string {
		switch {
		case args[0] == "FUNCTION":
			// The slot leaves a now: the map every node gives says so
			// before a answers MOVED, as a real cluster's would (else a
			// fetch the MOVED starts could send the retry back to a).
			fc.setSlots(fakeRange{0, SlotCount - 1, b})
			loaded.Store(true)
			return "+lib\r\n"
		case !loaded.Load():
			return respErr("ERR Function not found")
		default:
			return respErr(fmt.Sprintf("MOVED %d %s", Slot("k"), b.addr))
		}
	})
	b = fc.node(t, func(_ *fakeSession, args []string) string { return respBulk("b") })
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, obs := newTestClient(t, a.addr)

	var v string
	err := c.Do(context.Background(), "k", func(conn redis.Conn) error {
		reply, err := conn.Do("FCALL", "f", 1, "k")
		if IsFunctionMissingReply(err) {
			if _, err = conn.Do("FUNCTION", "LOAD", "code"); err == nil {
				reply, err = conn.Do("FCALL", "f", 1, "k")
			}
		}
		v, err = redis.String(reply, err)
		return err
	})
	if err != nil || v != "b" {
		t.Fatalf("FCALL = %q, %v; want b's answer", v, err)
	}
	if got := obs.redirected(RedirectMoved); got != 1 {
		t.Errorf("moved redirects = %d, want 1", got)
	}
}

// TRYAGAIN and CLUSTERDOWN are retried on the same node after a pause;
// CLUSTERDOWN also makes the client fetch the map.
func TestDoRetriesAfterAPause(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		reply, kind string
		refetches   bool
	}{
		{"TRYAGAIN Multiple keys request during rehashing of slot", RedirectTryAgain, false},
		{"CLUSTERDOWN The cluster is down", RedirectClusterDown, true},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			fc := &fakeCluster{}
			var calls atomic.Int64
			a := fc.node(t, func(*fakeSession, []string) string {
				if calls.Add(1) <= 2 {
					return respErr(tt.reply)
				}
				return respBulk("a")
			})
			fc.setSlots(fakeRange{0, SlotCount - 1, a})
			c, obs := newTestClient(t, a.addr)
			asked := fc.slotsAsked.Load()

			start := time.Now()
			if v, err := get(c, "k"); err != nil || v != "a" {
				t.Fatalf("GET = %q, %v", v, err)
			}
			if took := time.Since(start); took < firstBackoff+2*firstBackoff {
				t.Errorf("two retries took %v, want the pauses of at least %v", took, 3*firstBackoff)
			}
			if got := count(a.received(), "GET"); got != 3 {
				t.Errorf("a got %d GETs, want 3", got)
			}
			if got := obs.redirected(tt.kind); got != 2 {
				t.Errorf("%s redirects = %d, want 2", tt.kind, got)
			}
			if tt.refetches {
				redistest.WaitFor(t, 5*time.Second, "a fetch of the map", func() bool { return fc.slotsAsked.Load() > asked })
			}
		})
	}
}

// A call refused for ever fails after the bounded attempts, with the
// refusal, which the engine counts as Redis unavailable.
func TestDoGivesUp(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	a := fc.node(t, func(*fakeSession, []string) string {
		return respErr("TRYAGAIN Multiple keys request during rehashing of slot")
	})
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, _ := newTestClient(t, a.addr)
	_, err := get(c, "k")
	if RedirectKind(err) != RedirectTryAgain || !IsTransientReply(err) {
		t.Fatalf("GET = %v, want the TRYAGAIN reply", err)
	}
	if got := count(a.received(), "GET"); got != maxAttempts {
		t.Errorf("a got %d GETs, want %d", got, maxAttempts)
	}

	// A cancelled context ends the retries at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = c.Do(ctx, "k", func(conn redis.Conn) error { _, err := conn.Do("GET", "k"); return err })
	if err == nil {
		t.Fatal("Do with a cancelled context succeeded")
	}
}

// A command that ran is never repeated: when a later command of f is
// redirected, Do returns the error.
func TestDoDoesNotRepeatWhatRan(t *testing.T) {
	t.Parallel()
	c, a, b := setRunsTheRestMoved(t)

	err := c.Do(context.Background(), "k", func(conn redis.Conn) error {
		if _, err := conn.Do("SET", "k", "v"); err != nil {
			return err
		}
		_, err := conn.Do("GET", "k")
		return err
	})
	if RedirectKind(err) != RedirectMoved {
		t.Fatalf("Do = %v, want the MOVED reply returned", err)
	}
	if got := a.received(); !slices.Equal(got, []string{"SET k v", "GET k"}) {
		t.Errorf("a received %q, want one SET and one GET", got)
	}
	if got := b.received(); len(got) != 0 {
		t.Errorf("b received %q, want nothing", got)
	}
	// The MOVED still taught the map where the slot is.
	if v, err := get(c, "k"); err != nil || v != "b" {
		t.Fatalf("next GET = %q, %v; want b's answer", v, err)
	}
}

// A Do after Sends reads their replies with its own: a refusal among them
// does not make the Do's command, which ran, run again.
func TestDoDoesNotRepeatAPipelineThatRan(t *testing.T) {
	t.Parallel()
	c, a, b := setRunsTheRestMoved(t)

	err := c.Do(context.Background(), "k", func(conn redis.Conn) error {
		if err := conn.Send("GET", "k"); err != nil {
			return err
		}
		_, err := conn.Do("SET", "k", "v")
		return err
	})
	if RedirectKind(err) != RedirectMoved {
		t.Fatalf("Do = %v, want the MOVED reply returned", err)
	}
	if got := a.received(); !slices.Equal(got, []string{"GET k", "SET k v"}) {
		t.Errorf("a received %q, want one GET and one SET", got)
	}
	if got := b.received(); len(got) != 0 {
		t.Errorf("b received %q, want nothing", got)
	}
}

// A pipeline whose connection fails after one command was refused is not
// run again: the commands after the refusal may have run (and a pipeline
// need not be safe to repeat once part of it ran).
func TestDoDoesNotRepeatAPipelineCutShort(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	b := fc.node(t, serveConstant("b"))
	a := fc.node(t, func(_ *fakeSession, args []string) string {
		if args[1] == "k" {
			return respErr(fmt.Sprintf("MOVED %d %s", Slot("k"), b.addr))
		}
		return "" // the connection breaks
	})
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, _ := newTestClient(t, a.addr)

	err := c.Do(context.Background(), "k", func(conn redis.Conn) error {
		for _, k := range []string{"k", "j"} {
			if err := conn.Send("SET", k, "v"); err != nil {
				return err
			}
		}
		if err := conn.Flush(); err != nil {
			return err
		}
		if _, err := conn.Receive(); RedirectKind(err) != RedirectMoved {
			return fmt.Errorf("first reply %v, want MOVED", err)
		}
		_, err := conn.Receive()
		return err
	})
	if err == nil || RedirectKind(err) != "" {
		t.Fatalf("Do = %v, want the connection's error", err)
	}
	if got := a.received(); !slices.Equal(got, []string{"SET k v", "SET j v"}) {
		t.Errorf("a received %q, want the two SETs once", got)
	}
	if got := b.received(); len(got) != 0 {
		t.Errorf("b received %q, want nothing", got)
	}
}

// A connection lost after a command was sent is not retried (the command
// may have run) but makes the client fetch the map; once the dead node's
// slots are served elsewhere, calls succeed again, Dial included.
func TestRefreshAfterANodeDies(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	a := fc.node(t, serveConstant("a"))
	b := fc.node(t, serveConstant("b"))
	fc.setSlots(fakeRange{0, 8000, a}, fakeRange{8001, SlotCount - 1, b})
	c, obs := newTestClient(t, a.addr, b.addr)
	keyOnA := "k"
	if Slot(keyOnA) > 8000 {
		t.Fatalf("test key %q is in slot %d, want one of a's", keyOnA, Slot(keyOnA))
	}
	if v, err := get(c, keyOnA); err != nil || v != "a" {
		t.Fatalf("GET = %q, %v", v, err)
	}

	refreshes := obs.refreshed(true)
	a.stop()
	fc.setSlots(fakeRange{0, SlotCount - 1, b}) // b's replica took over a's slots
	// The pool holds an idle connection to a: the GET is sent, the
	// connection drops.
	_, err := get(c, keyOnA)
	var reply redis.Error
	if err == nil || errors.As(err, &reply) {
		t.Fatalf("GET on the dead node's idle connection = %v, want a connection error", err)
	}
	if got := count(b.received(), "GET"); got != 0 {
		t.Errorf("b got %d GETs, want none: the failed GET is not repeated", got)
	}
	// Whether the fetch is done or not, the next call finds b: a dial
	// to a fails and waits for the new map.
	if v, err := get(c, keyOnA); err != nil || v != "b" {
		t.Fatalf("GET after the node died = %q, %v; want b's answer", v, err)
	}
	if obs.refreshed(true) <= refreshes {
		t.Error("no map fetch after the node died")
	}
	conn, err := c.Dial(context.Background(), keyOnA)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	defer conn.Close()
	if v, err := redis.String(conn.Do("GET", keyOnA)); err != nil || v != "b" {
		t.Fatalf("GET on the dialed connection = %q, %v; want b's answer", v, err)
	}
	if got, err := c.Primaries(context.Background()); err != nil || !slices.Equal(got, []string{b.addr}) {
		t.Errorf("Primaries = %v, %v; want [%s]", got, err, b.addr)
	}
}

// A fetched map is counted before it is installed, so that a call routed
// by it, and a read of the count after that call, find the fetch counted
// (TestRefreshAfterANodeDies failed once in CI when the count came after).
func TestMapRefreshIsCountedBeforeTheMapIsUsed(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	a := fc.node(t, serveConstant("a"))
	b := fc.node(t, serveConstant("b"))
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, obs := newTestClient(t, a.addr, b.addr)
	fc.setSlots(fakeRange{0, SlotCount - 1, b})
	routedWhenCounted := make(chan string, 1)
	obs.mu.Lock()
	obs.onRefresh = func(ok bool) {
		if ok {
			select {
			case routedWhenCounted <- c.ServerOf("k"):
			default:
			}
		}
	}
	obs.mu.Unlock()
	if err := c.awaitRefresh(context.Background()); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if got := <-routedWhenCounted; got != a.addr {
		t.Errorf("when the fetch was counted, calls were already routed to %s by the new map; want %s, the old", got, a.addr)
	}
	if got := c.ServerOf("k"); got != b.addr {
		t.Errorf("after the refresh, calls go to %s, want %s", got, b.addr)
	}
}

// A READONLY reply (the node was demoted) drops the connection, and the
// call is retried once the map was fetched again.
func TestDoAfterReadOnly(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	a := fc.node(t, func(*fakeSession, []string) string {
		return respErr("READONLY You can't write against a read only replica.")
	})
	b := fc.node(t, serveConstant("b"))
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, _ := newTestClient(t, a.addr)
	fc.setSlots(fakeRange{0, SlotCount - 1, b})
	if v, err := get(c, "k"); err != nil || v != "b" {
		t.Fatalf("GET = %q, %v; want b's answer after the map was fetched again", v, err)
	}
	if got := count(a.received(), "GET"); got != 1 {
		t.Errorf("a got %d GETs, want 1", got)
	}
}

// A blocked BLPOP unblocked by MOVED (its slot moved) teaches the map the
// new owner: the next Dial goes there.
func TestDialAfterABlockingCallWasMoved(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	var bAddr atomic.Value
	a := fc.node(t, func(_ *fakeSession, args []string) string {
		return respErr(fmt.Sprintf("MOVED %d %s", Slot(args[1]), bAddr.Load()))
	})
	b := fc.node(t, func(*fakeSession, []string) string { return "*-1\r\n" })
	bAddr.Store(b.addr)
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, obs := newTestClient(t, a.addr)

	conn, err := c.Dial(context.Background(), "wake")
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	// The slot moves while the BLPOP waits: from now on the nodes' map
	// says b too (were it to lag, a fetch could undo what MOVED taught).
	fc.setSlots(fakeRange{0, SlotCount - 1, b})
	_, err = conn.Do("BLPOP", "wake", 1)
	conn.Close()
	if !isRedirect(err) {
		t.Fatalf("BLPOP = %v, want the MOVED", err)
	}
	conn, err = c.Dial(context.Background(), "wake")
	if err != nil {
		t.Fatalf("Dial again: %v", err)
	}
	defer conn.Close()
	if reply, err := conn.Do("BLPOP", "wake", 1); err != nil || reply != nil {
		t.Fatalf("BLPOP on the new owner = %v, %v; want a timeout (nil)", reply, err)
	}
	if got := count(b.received(), "BLPOP"); got != 1 {
		t.Errorf("b got %d BLPOPs, want 1", got)
	}
	if got := obs.redirected(RedirectMoved); got != 1 {
		t.Errorf("moved redirects = %d, want 1", got)
	}
}

// A storm of MOVED replies, one per call in flight, costs a few fetches of
// the map, not one each. Here the nodes' map lags (it keeps every slot on
// a), so each fetch undoes the owners learnt from MOVED, and the storm goes
// on for as long as the calls do.
func TestMovedStormIsOneRefresh(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	var bAddr atomic.Value
	a := fc.node(t, func(_ *fakeSession, args []string) string {
		return respErr(fmt.Sprintf("MOVED %d %s", Slot(args[1]), bAddr.Load()))
	})
	b := fc.node(t, serveConstant("b"))
	bAddr.Store(b.addr)
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, obs := newTestClient(t, a.addr)
	before := fc.slotsAsked.Load()

	const callers, callsEach = 100, 5
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, callers*callsEach)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range callsEach {
				key := fmt.Sprintf("key%d-%d", i, j)
				if v, err := get(c, key); err != nil || v != "b" {
					errs <- fmt.Errorf("GET %s = %q, %v", key, v, err)
				}
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// At most one fetch per 200 ms (minRefreshGap, as documented), plus
	// the one running when the storm ended.
	asked := fc.slotsAsked.Load() - before
	if limit := int64(took/(200*time.Millisecond)) + 2; asked > limit {
		t.Errorf("%d calls redirected within %v fetched the map %d times, want at most %d",
			callers*callsEach, took, asked, limit)
	}
	if got := obs.redirected(RedirectMoved); got < callers {
		t.Errorf("moved redirects = %d, want at least %d", got, callers)
	}
	t.Logf("%d calls, %d MOVED, %d map fetches in %v", callers*callsEach, obs.redirected(RedirectMoved), asked, took)
}

// A map fetched while a MOVED reply was met may predate it: the owner the
// MOVED named stays in force over the fetched map.
func TestMovedDuringAFetchOutlivesIt(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	var movedTo atomic.Value
	movedTo.Store("")
	a := fc.node(t, func(_ *fakeSession, args []string) string {
		if to := movedTo.Load().(string); to != "" {
			return respErr(fmt.Sprintf("MOVED %d %s", Slot(args[1]), to))
		}
		return respBulk("a")
	})
	b := fc.node(t, serveConstant("b"))
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, obs := newTestClient(t, a.addr)

	// A fetch starts and gets the map as it is: everything on a.
	gate := fc.holdSlots(t)
	c.requestRefresh()
	<-gate.arrived
	// Then the slots move to b, and a call meets the MOVED.
	fc.setSlots(fakeRange{0, SlotCount - 1, b})
	movedTo.Store(b.addr)
	if v, err := get(c, "k"); err != nil || v != "b" {
		t.Fatalf("GET = %q, %v; want b's answer", v, err)
	}
	// The stale fetch ends; the next one (asked for by the MOVED) is held.
	refreshes := obs.refreshed(true)
	gate.release <- struct{}{}
	redistest.WaitFor(t, 5*time.Second, "the stale map to be installed", func() bool { return obs.refreshed(true) > refreshes })
	if v, err := get(c, "k"); err != nil || v != "b" {
		t.Fatalf("GET after the stale fetch = %q, %v; want b's answer", v, err)
	}
	if got := count(a.received(), "GET"); got != 1 {
		t.Errorf("a got %d GETs, want 1: the stale map sent the call back to a", got)
	}
}

// After an ASK, a pipeline's commands each get their ASKING, and f reads
// only its own replies.
func TestDoFollowsAskWithAPipeline(t *testing.T) {
	t.Parallel()
	fc := &fakeCluster{}
	var bAddr atomic.Value
	a := fc.node(t, func(_ *fakeSession, args []string) string {
		return respErr(fmt.Sprintf("ASK %d %s", Slot(args[1]), bAddr.Load()))
	})
	b := fc.node(t, func(s *fakeSession, args []string) string {
		if !s.asking {
			return respErr(fmt.Sprintf("MOVED %d %s", Slot(args[1]), a.addr))
		}
		return respBulk("b:" + args[1])
	})
	bAddr.Store(b.addr)
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, _ := newTestClient(t, a.addr)

	keys := []string{"{p}1", "{p}2"}
	var got []string
	err := c.Do(context.Background(), keys[0], func(conn redis.Conn) error {
		got = got[:0]
		for _, k := range keys {
			if err := conn.Send("GET", k); err != nil {
				return err
			}
		}
		if err := conn.Flush(); err != nil {
			return err
		}
		for range keys {
			v, err := redis.String(conn.Receive())
			if err != nil {
				return err
			}
			got = append(got, v)
		}
		return nil
	})
	if err != nil || !slices.Equal(got, []string{"b:{p}1", "b:{p}2"}) {
		t.Fatalf("pipeline = %q, %v; want both of b's answers", got, err)
	}
	if got := b.received(); !slices.Equal(got, []string{"ASKING", "GET {p}1", "ASKING", "GET {p}2"}) {
		t.Errorf("b received %q, want ASKING before each GET", got)
	}
}

// setRunsTheRestMoved is a fake cluster where node a serves every slot,
// runs SET and answers MOVED to b for anything else; b answers "b" to
// everything. c is a client of it.
func setRunsTheRestMoved(t *testing.T) (c *Client, a, b *fakeNode) {
	t.Helper()
	fc := &fakeCluster{}
	b = fc.node(t, serveConstant("b"))
	a = fc.node(t, func(_ *fakeSession, args []string) string {
		if args[0] == "SET" {
			return "+OK\r\n"
		}
		return respErr(fmt.Sprintf("MOVED %d %s", Slot(args[1]), b.addr))
	})
	fc.setSlots(fakeRange{0, SlotCount - 1, a})
	c, _ = newTestClient(t, a.addr)
	return c, a, b
}

// A fetch after the first asks the nodes of the current map before the
// seeds: a seed that accepts connections and never answers costs the
// first fetch its timeout, and no later one.
func TestRefreshAsksCurrentNodesBeforeSeeds(t *testing.T) {
	t.Parallel()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := silent.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		silent.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	fc := &fakeCluster{}
	a := fc.node(t, serveConstant("a"))
	fc.setSlots(fakeRange{0, SlotCount - 1, a})

	c, _ := newTestClient(t, silent.Addr().String(), a.addr)
	// The first fetch asked it (the seeds come first then) and timed out.
	for deadline := time.Now().Add(5 * time.Second); accepted.Load() != 1; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the first fetch connected to the silent seed %d times, want once", accepted.Load())
		}
	}
	m, err := c.fetchSlotMap(context.Background())
	if err != nil || m.covered() != SlotCount {
		t.Fatalf("fetchSlotMap = %v, %v; want a's full map", m, err)
	}
	if n := accepted.Load(); n != 1 {
		t.Errorf("the later fetch connected to the silent seed (%d connections): it asked it before a, the current primary", n)
	}
}
