package delayqueue

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// One claim.lua call serving several requests reads a topic's entries
// once for all the requests naming it. Each request still gets what it
// would get alone, in order: the first topic listed wins, later requests
// get the entries earlier ones left, and an entry whose job is gone is
// dropped and read past, reading more when the first read held only it.
func TestClaimCallServesRequestsInOrder(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r, func(o *Options) { o.BucketSize = 1 })
		ctx := context.Background()
		for _, id := range []string{"a1", "a2", "a3", "a4", "a5", "a6"} {
			mustPush(t, q, Job{Topic: "a", ID: id})
		}
		mustPush(t, q, Job{Topic: "b", ID: "b1"})
		p := q.partitions[0]
		dropRecord := func(id string) {
			t.Helper()
			if err := p.withConn(ctx, func(c redis.Conn) error {
				_, err := c.Do("HDEL", p.key(), id)
				return err
			}); err != nil {
				t.Fatalf("HDEL %s: %v", id, err)
			}
		}
		dropRecord("a3") // its ready entry stays, matching no job

		steps := []struct {
			name  string
			setup func()
			calls []claimCall
			want  [][]string // per request, the ids claimed
		}{
			{"requests share a topic's read", func() {}, []claimCall{
				{topics: []string{"a"}, count: 2},
				{topics: []string{"b", "a"}, count: 2},
				{topics: []string{"b"}, count: 1},
				{topics: []string{"a"}, count: 1},
			}, [][]string{{"a1", "a2"}, {"b1", "a4"}, nil, {"a5"}}},
			// The first request reads for itself and the two after it that
			// name "a": up to 1+5+1 entries, which are a6, a7 (gone) and a8.
			{"a job gone within the read", func() {
				mustPush(t, q, Job{Topic: "a", ID: "a7"})
				mustPush(t, q, Job{Topic: "a", ID: "a8"})
				dropRecord("a7")
			}, []claimCall{
				{topics: []string{"a"}, count: 1},
				{topics: []string{"a"}, count: 5},
				{topics: []string{"a", "b"}, count: 1},
			}, [][]string{{"a6"}, {"a8"}, nil}},
			// Alone, a request of one reads one entry: a9's, whose job is
			// gone; the index did not end there, so it reads again.
			{"a read holding only a gone job", func() {
				mustPush(t, q, Job{Topic: "a", ID: "a9"})
				mustPush(t, q, Job{Topic: "a", ID: "a10"})
				dropRecord("a9")
			}, []claimCall{
				{topics: []string{"a"}, count: 1},
			}, [][]string{{"a10"}}},
		}
		for _, step := range steps {
			step.setup()
			got, err := q.execClaims(ctx, p, []claimBatch{{calls: step.calls}})
			if err != nil {
				t.Fatalf("%s: execClaims: %v", step.name, err)
			}
			for i, ds := range got[0].deliveries {
				var ids []string
				for _, d := range ds {
					ids = append(ids, d.ID)
				}
				if !slices.Equal(ids, step.want[i]) {
					t.Errorf("%s: request %d (%v, count %d) claimed %v, want %v",
						step.name, i, step.calls[i].topics, step.calls[i].count, ids, step.want[i])
				}
			}
		}
		// The entries that matched no job are gone from the ready index.
		var left []string
		if err := p.withConn(ctx, func(c redis.Conn) error {
			var err error
			left, err = redis.Strings(c.Do("ZRANGE", p.keyAt(keyReady), 0, -1))
			return err
		}); err != nil {
			t.Fatalf("ZRANGE ready: %v", err)
		}
		if len(left) != 0 {
			t.Errorf("ready index after the claims: %q, want empty", left)
		}
	})
}

// A claim.lua call finishes the ids its batches carry before it claims, as
// finish.lua would just before: a finished ready job is not claimed, a
// dead letter is left alone, an unknown id is reported unknown, and each
// batch gets its own outcomes, whichever batch carried the ids.
func TestClaimCallFinishesFirst(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r, func(o *Options) { o.BucketSize = 1 })
		ctx := context.Background()
		for _, id := range []string{"c1", "c2", "c3", "c4"} {
			mustPush(t, q, Job{Topic: "c", ID: id, TTR: time.Minute})
		}
		if d := mustPop(t, q, 0, "c"); d == nil || d.ID != "c1" {
			t.Fatalf("pop = %+v, want c1", d)
		}
		mustPush(t, q, Job{Topic: "d", ID: "dead", TTR: time.Minute, MaxAttempts: 1})
		if d := mustPop(t, q, 0, "d"); d == nil || d.ID != "dead" {
			t.Fatalf("pop = %+v, want dead", d)
		}
		if state, _, err := q.Release(ctx, "dead", nil, 0); err != nil || state != StateDead {
			t.Fatalf("release = %s, %v", state, err)
		}

		got, err := q.execClaims(ctx, q.partitions[0], []claimBatch{
			{finish: []any{"c1", "c2", "unknown", "dead"}},
			{calls: []claimCall{{topics: []string{"c"}, count: 2}}},
			{finish: []any{"c4"}},
		})
		if err != nil {
			t.Fatal(err)
		}
		want := [][]removal{
			{{1, "c"}, {1, "c"}, {0, ""}, {-1, "d"}},
			nil,
			{{1, "c"}},
		}
		for i := range want {
			if !slices.Equal(got[i].removals, want[i]) {
				t.Errorf("batch %d: removals %+v, want %+v", i, got[i].removals, want[i])
			}
		}
		if len(got[1].deliveries) != 1 || len(got[1].deliveries[0]) != 1 || got[1].deliveries[0][0].ID != "c3" {
			t.Fatalf("claims %+v, want c3 alone: c2 and c4 were finished first", got[1].deliveries)
		}
		for id, state := range map[string]string{"c1": "", "c2": "", "c3": StateReserved, "c4": "", "dead": StateDead} {
			info, err := q.Get(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case state == "" && info != nil:
				t.Errorf("%s is %s after its finish", id, info.State)
			case state != "" && (info == nil || info.State != state):
				t.Errorf("%s is %+v, want %s", id, info, state)
			}
		}
	})
}
