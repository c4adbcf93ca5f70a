package delayqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// v1Fixture is testdata/layout-v1.json: the keys this server's layout
// before partitions left in Redis (db 1), dumped after its own scripts
// (the release before partitions, driven over HTTP) pushed, popped and
// released jobs in every state: delayed, ready, reserved, retrying, dead
// with a body stored whole, and webhook jobs.
type v1Fixture struct {
	CapturedAtMs int64 `json:"captured_at_ms"`
	Keys         []struct {
		Key  string            `json:"key"`
		Type string            `json:"type"`
		Hash map[string]string `json:"hash"`
		ZSet []string          `json:"zset"`
		List []string          `json:"list"`
		Set  []string          `json:"set"`
	} `json:"keys"`
}

// loadV1Fixture writes the fixture into db 1 of r's server, its times
// moved by as much as has passed since it was captured, so that the jobs
// are due as they were then.
func loadV1Fixture(t *testing.T, r *testRedis) {
	t.Helper()
	raw, err := os.ReadFile("testdata/layout-v1.json")
	if err != nil {
		t.Fatal(err)
	}
	var f v1Fixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	shift := time.Now().UnixMilli() - f.CapturedAtMs
	moved := func(ms string) string {
		n, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			t.Fatalf("time %q: %v", ms, err)
		}
		return strconv.FormatInt(n+shift, 10)
	}
	c := r.dialPrimary(t, r.opts.Addr)
	defer c.Close()
	for _, k := range f.Keys {
		args := []any{k.Key}
		var cmd string
		switch k.Type {
		case "hash":
			cmd = "HSET"
			for field, v := range k.Hash {
				if strings.HasPrefix(k.Key, "dq_job:") && (field == "c" || field == "d" || field == "l" || field == "dt") {
					v = moved(v)
				}
				args = append(args, field, v)
			}
		case "zset":
			cmd = "ZADD"
			for i := 0; i < len(k.ZSet); i += 2 {
				args = append(args, moved(k.ZSet[i+1]), k.ZSet[i])
			}
		case "list":
			cmd = "RPUSH"
			for _, v := range k.List {
				args = append(args, v)
			}
		case "set":
			cmd = "SADD"
			for _, v := range k.Set {
				args = append(args, v)
			}
		default:
			t.Fatalf("fixture key %s of type %s", k.Key, k.Type)
		}
		if _, err := c.Do(cmd, args...); err != nil {
			t.Fatalf("%s %s: %v", cmd, k.Key, err)
		}
	}
}

// Jobs of the layout before partitions are moved into partitions at
// start-up, each in its state, and nothing of the old layout stays. Not on
// a cluster: that layout never ran on one, and Run does not look for it
// there.
func TestMigrateV1Layout(t *testing.T) {
	t.Parallel()
	forEachStandaloneBackend(t, func(t *testing.T, r *testRedis) {
		loadV1Fixture(t, r)
		q := newTestQueue(t, r)
		ctx := context.Background()
		for _, want := range []struct {
			id, topic, state, body string
			attempts               int
			hasCallback            bool
		}{
			{id: "v1-delayed", topic: "orders", state: StateDelay, body: "later"},
			{id: "v1-ready", topic: "orders", state: StateReserved, body: "now", attempts: 1},
			{id: "v1-ready-2", topic: "orders", state: StateReady, body: strings.Repeat("m", 150)},
			{id: "v1-reserved", topic: "orders", state: StateReady, body: "held"},
			{id: "v1-retry", topic: "mail", state: StateDelay, body: "retry me", attempts: 1},
			{id: "v1-dead", topic: "mail", state: StateDead, body: strings.Repeat("b", 7000), attempts: 1},
			{id: "v1-hook", topic: "hooks", state: StateDelay, body: `{"a":1}`, hasCallback: true},
		} {
			info, err := q.Get(ctx, want.id)
			if err != nil || info == nil {
				t.Fatalf("get %s: %+v, %v", want.id, info, err)
			}
			if info.Topic != want.topic || info.State != want.state || info.Body != want.body || info.Attempts != want.attempts ||
				(info.Callback != nil) != want.hasCallback {
				t.Errorf("%s migrated as %s/%s attempts %d callback %v body %d bytes, want %s/%s attempts %d callback %v body %d bytes",
					want.id, info.Topic, info.State, info.Attempts, info.Callback != nil, len(info.Body),
					want.topic, want.state, want.attempts, want.hasCallback, len(want.body))
			}
		}
		retry, _ := q.Get(ctx, "v1-retry")
		if retry.MaxAttempts != 5 || len(retry.Retry) != 2 || retry.DueAt.Before(time.Now().Add(50*time.Minute)) {
			t.Errorf("v1-retry = %+v, want its schedule, max attempts and due time kept", retry)
		}
		dead, _ := q.Get(ctx, "v1-dead")
		if dead.DeadReason != ReasonReleased || dead.DeadAt.IsZero() {
			t.Errorf("v1-dead = %+v, want its reason and time of death", dead)
		}
		lease, _ := q.Get(ctx, "v1-ready")
		if lease.LeaseUntil.IsZero() {
			t.Errorf("v1-ready = %+v, want its lease kept", lease)
		}
		stats, err := q.Stats(ctx, "")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]TopicStats{
			"orders": {Delay: 1, Ready: 2, Reserved: 1},
			"mail":   {Delay: 1, Dead: 1},
			"hooks":  {Delay: 1},
		}
		// v1-hook-ready was due already: it may have been called (and
		// failed) or wait to be.
		hooks := stats["hooks"]
		if hooks.Delay+hooks.Ready+hooks.Reserved != 2 {
			t.Errorf("hooks stats %+v, want its two jobs", hooks)
		}
		for topic, w := range want {
			if topic != "hooks" && stats[topic] != w {
				t.Errorf("%s stats %+v, want %+v", topic, stats[topic], w)
			}
		}
		// The two ready jobs pop, and nothing of the old layout is left.
		got := map[string]bool{}
		for range 2 {
			d := mustPop(t, q, time.Second, "orders")
			if d == nil {
				t.Fatal("a migrated ready job did not pop")
			}
			got[d.ID] = true
		}
		if !got["v1-ready-2"] || !got["v1-reserved"] {
			t.Errorf("popped %v, want v1-ready-2 and v1-reserved", got)
		}
		for _, k := range r.rawKeys(t)[r.opts.Addr] {
			if !strings.HasPrefix(k, "{") && k != "dq_layout" {
				t.Errorf("old key %s left behind", k)
			}
		}
		if l, found, err := ReadLayout(ctx, q.rdb, "dq_"); err != nil || !found || l.Partitions != 3 {
			t.Errorf("layout record = %+v, %v, %v", l, found, err)
		}
	})
}

// The ready jobs of the layout before partitions keep their order: within a
// partition they pop as their old ready list had them, whatever the order
// the migration finds their records in, and before a job that came due
// after them while no server ran.
func TestMigrateV1KeepsTheReadyOrder(t *testing.T) {
	t.Parallel()
	forEachStandaloneBackend(t, func(t *testing.T, r *testRedis) {
		c := r.dialPrimary(t, r.opts.Addr)
		defer c.Close()
		now := time.Now().UnixMilli()
		// Ids of one partition of the default 3, in the old list's order;
		// due times that do not follow it (a job made ready at once sits
		// behind one the scanner moved a moment later).
		var ids []string
		for i := 0; len(ids) < 40; i++ {
			if id := fmt.Sprintf("v1-order-%d", i); partitionNumber(id, 3) == 2 {
				ids = append(ids, id)
			}
		}
		for i, id := range ids {
			due := now - 20_000 + int64((i*7)%11)*100
			if _, err := c.Do("HSET", "dq_job:"+id, "a", 0, "b1", "body of "+id, "c", due, "d", due, "k", 1, "n", 1,
				"r", 30, "s", "ready", "t", "orders"); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Do("RPUSH", "dq_queue_orders", id); err != nil {
				t.Fatal(err)
			}
		}
		late := "v1-late"
		for i := 0; partitionNumber(late, 3) != 2; i++ {
			late = fmt.Sprintf("v1-late-%d", i)
		}
		if _, err := c.Do("HSET", "dq_job:"+late, "a", 0, "b1", "due later", "c", now-60_000, "d", now-1_000, "k", 2, "n", 1,
			"r", 30, "s", "delay", "t", "orders"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do("ZADD", "dq_bucket_2", now-1_000, late); err != nil {
			t.Fatal(err)
		}

		q := newTestQueue(t, r)
		want := append(append([]string(nil), ids...), late)
		var got []string
		for len(got) < len(want) {
			d := mustPop(t, q, 5*time.Second, "orders")
			if d == nil {
				t.Fatalf("popped %d of %d jobs, then none", len(got), len(want))
			}
			got = append(got, d.ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("popped\n%v\nwant the old list's order, then the job due later:\n%v", got, want)
		}
	})
}

// A layout record Redis lost while a server runs (a restart without
// persistence, a FLUSHDB) is written back by the server's next sweeper
// round, so that a server started later with another bucket_size is
// refused rather than let misroute the jobs stored since. A record that
// meanwhile says another count is reported as the round's error.
func TestLostLayoutRecordIsWrittenBack(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		q := newTestQueue(t, r) // 3 partitions
		rdb := r.client(t)
		key := q.keys.layout()
		do := func(args ...any) {
			t.Helper()
			if err := rdb.Do(ctx, key, func(c redis.Conn) error {
				_, err := c.Do(args[0].(string), args[1:]...)
				return err
			}); err != nil {
				t.Fatalf("%v: %v", args, err)
			}
		}
		do("DEL", key)
		mustPush(t, q, Job{Topic: "lay", ID: "after-the-loss", Delay: time.Hour})
		if _, found, err := ReadLayout(ctx, rdb, q.keys.prefix); err != nil || found {
			t.Fatalf("layout record after DEL: found %v, %v", found, err)
		}
		if script, err := q.sweepRound(ctx); err != nil {
			t.Fatalf("sweeper round: %s: %v", script, err)
		}
		if _, err := ResolvePartitions(ctx, rdb, q.keys.prefix, 5, 3); !errors.Is(err, ErrLayout) {
			t.Fatalf("bucket_size 5 after the record was written back: %v, want ErrLayout", err)
		}
		if n, err := ResolvePartitions(ctx, rdb, q.keys.prefix, 0, 7); err != nil || n != 3 {
			t.Fatalf("unset bucket_size resolved to %d, %v; want the server's 3", n, err)
		}

		do("HSET", key, "partitions", 5)
		if script, err := q.sweepRound(ctx); !errors.Is(err, ErrLayout) || script != "HSETNX" {
			t.Fatalf("round with a record of 5 partitions: %s, %v; want HSETNX, ErrLayout", script, err)
		}
	})
}

// A record of version 2 (jobs of the earlier record form, which this
// release reads as they are) is raised to this release's version; a
// record of a newer version is refused.
func TestLayoutVersionIsRaisedAndANewerOneRefused(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		q := newTestQueue(t, r)
		rdb := r.client(t)
		key := q.keys.layout()
		for _, c := range []struct {
			recorded, want int
			refused        bool
		}{
			{recorded: 2, want: layoutVersion},
			{recorded: layoutVersion, want: layoutVersion},
			{recorded: layoutVersion + 1, want: layoutVersion + 1, refused: true},
		} {
			if err := rdb.Do(ctx, key, func(c2 redis.Conn) error {
				_, err := c2.Do("HSET", key, "version", c.recorded)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			_, err := q.sweepRound(ctx)
			if c.refused != errors.Is(err, ErrLayout) {
				t.Fatalf("round with version %d: %v, want refused %v", c.recorded, err, c.refused)
			}
			if c.refused && !strings.Contains(err.Error(), "newer release") {
				t.Fatalf("round with version %d: %v, want it to name a newer release", c.recorded, err)
			}
			layout, found, err := ReadLayout(ctx, rdb, q.keys.prefix)
			if err != nil || !found || layout.Version != c.want || layout.Partitions != 3 {
				t.Fatalf("after a round with version %d: %+v, %v, %v; want version %d", c.recorded, layout, found, err, c.want)
			}
		}
	})
}

// A server does not start on data of a newer layout version: Run fails
// with ErrLayout before serving.
func TestRunRefusesANewerLayoutVersion(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		ctx := context.Background()
		logger := redistest.Logger(t)
		rdb := newClient(t, r.opts, logger)
		q := newQueue(t, rdb, r.queueOptions(Options{BucketSize: 3, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
			BlockTimeout: 30 * time.Second}), logger)
		key := q.keys.layout()
		if err := rdb.Do(ctx, key, func(c redis.Conn) error {
			_, err := c.Do("HSET", key, "partitions", 3, "version", layoutVersion+1)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		err := q.Run(runCtx)
		if !errors.Is(err, ErrLayout) || !strings.Contains(err.Error(), "newer release") {
			t.Fatalf("Run on layout version %d: %v; want ErrLayout naming a newer release", layoutVersion+1, err)
		}
		select {
		case <-q.Started():
			t.Fatal("the queue started serving on a newer layout")
		default:
		}
	})
}
