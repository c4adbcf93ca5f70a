package delayqueue

import (
	"context"
	"slices"
	"testing"

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
			for i, ds := range got[0] {
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
