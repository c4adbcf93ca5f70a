package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// idsPerPartition returns perPartition ids with prefix for each partition
// of q, in turn: partition 1's first, partition 2's first...
func idsPerPartition(t *testing.T, q *Queue, prefix string, perPartition int) []string {
	t.Helper()
	byPartition := make([][]string, len(q.partitions))
	for i, filled := 0, 0; filled < len(q.partitions); i++ {
		if i == 1000*perPartition*len(q.partitions) {
			t.Fatalf("%d ids spread over partitions thus: %v", i, byPartition)
		}
		id := fmt.Sprintf("%s%d.", prefix, i) // no id is the start of another
		n := q.partitionOf(id).number - 1
		if len(byPartition[n]) < perPartition {
			byPartition[n] = append(byPartition[n], id)
			if len(byPartition[n]) == perPartition {
				filled++
			}
		}
	}
	var ids []string
	for k := range perPartition {
		for _, p := range byPartition {
			ids = append(ids, p[k])
		}
	}
	return ids
}

// On a cluster made by redis-cli --cluster create, the partitions' tags
// land evenly on the primaries (3 partitions: one on each of 3; the
// cluster default of 12: four on each), so one topic's jobs are stored on
// every shard, each in its partition's slot, and pops take them from every
// shard: Pops try the partitions in turn, each starting at the next one.
// On a cluster only: it is about primaries.
func TestHotTopicUsesEveryPrimary(t *testing.T) {
	t.Parallel()
	for _, partitions := range []int{3, defaults.ClusterBucketSize} {
		t.Run(fmt.Sprint(partitions, " partitions"), func(t *testing.T) {
			r := newTestRedis(sharedCluster.Backend().Start(t))
			q := newTestQueue(t, r, func(o *Options) { o.BucketSize = partitions })
			ctx := context.Background()
			primaries := r.cluster.Primaries(t)
			ownerOf := map[int]string{} // partition number -> primary
			perPrimary := map[string]int{}
			for _, p := range q.partitions {
				owner := r.cluster.SlotOwner(t, redisconn.Slot(p.key()))
				ownerOf[p.number] = owner
				perPrimary[owner]++
			}
			for _, addr := range primaries {
				if perPrimary[addr] != partitions/len(primaries) {
					t.Fatalf("partitions per primary %v, want %d on each of %v", perPrimary, partitions/len(primaries), primaries)
				}
			}

			const perPartition = 4
			ids := idsPerPartition(t, q, "hot-", perPartition)
			jobs := make([]Job, len(ids))
			for i, id := range ids {
				jobs[i] = Job{Topic: "hot", ID: id, TTR: time.Minute, Body: id}
			}
			if _, err := q.PushBatch(ctx, jobs); err != nil {
				t.Fatal(err)
			}

			// Each job is stored, with every key naming it, on the primary
			// serving its partition's slot.
			content := rawContent(t, r)
			stored := map[string]int{}
			for _, tr := range naming(content, ids...) {
				stored[tr.primary]++
			}
			for _, id := range ids {
				p := q.partitionOf(id)
				for _, tr := range naming(content, id) {
					if slot := redisconn.Slot(tr.key); slot != redisconn.Slot(p.key()) || tr.primary != ownerOf[p.number] {
						t.Errorf("%s (partition %d, slot %d on %s) is in %s, slot %d on %s",
							id, p.number, redisconn.Slot(p.key()), ownerOf[p.number], tr.key, slot, tr.primary)
					}
				}
			}
			for _, addr := range primaries {
				if stored[addr] == 0 {
					t.Fatalf("no key of topic hot's jobs on primary %s (keys naming them per primary: %v)", addr, stored)
				}
			}

			// Pops take from one partition at a time (concurrent ones then
			// share its script calls), at most claimStint in a row, and
			// every partition gives out its jobs.
			var got []int
			for range partitions * perPartition {
				d := mustPop(t, q, 0, "hot")
				if d == nil {
					t.Fatalf("a pop found nothing after %v", got)
				}
				got = append(got, q.partitionOf(d.ID).number)
			}
			run, from := 0, map[int]int{}
			for i, n := range got {
				from[n]++
				if i > 0 && n == got[i-1] {
					run++
				} else {
					run = 1
				}
				if run > claimStint {
					t.Fatalf("pops took %d jobs in a row from partition %d: %v", run, n, got)
				}
			}
			for n := 1; n <= partitions; n++ {
				if from[n] != perPartition {
					t.Fatalf("pops took %v jobs per partition (%v), want %d from each", from, got, perPartition)
				}
			}
			if d := mustPop(t, q, 0, "hot"); d != nil {
				t.Fatalf("pop after every job was taken: %+v", d)
			}
			if statuses, err := q.FinishBatch(ctx, ids); err != nil || slices.ContainsFunc(statuses, func(s RemoveStatus) bool { return s != Removed }) {
				t.Fatalf("finish = %v, %v", statuses, err)
			}
			assertNoTraces(t, r, "hot")
		})
	}
}

// A topic or an id with { or } cannot move a key of its job out of its
// partition's slot: the partition's tag starts every key name. The key
// check (and, on the cluster, Redis itself) fails a script touching a key
// of another slot; this checks too that every key naming the job is in
// the slot, through push, delayed and held pops, release, touch, finish,
// dead letters, kick and dead delete.
func TestBracesInNamesStayInTheirPartitionSlot(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		// No name here is "{" alone or a part of the partitions' key names,
		// so that the keys naming one are the job's or the topic's.
		jobs := []Job{
			{Topic: "a{b}c", ID: "{x}y}"},
			{Topic: "a{b}c", ID: "{}"},
			{Topic: "{!", ID: "}{", MaxAttempts: 2},
			{Topic: "}x{y}", ID: "{a}b{c}", MaxAttempts: 1},
			{Topic: "{q}", ID: "{z", MaxAttempts: 1},
		}
		var topics, ids []string
		for i := range jobs {
			jobs[i].TTR = time.Minute
			jobs[i].Body = "body of " + jobs[i].ID
			if !slices.Contains(topics, jobs[i].Topic) {
				topics = append(topics, jobs[i].Topic)
			}
			ids = append(ids, jobs[i].ID)
		}
		inSlot := func(stage string, ids ...string) {
			t.Helper()
			content := rawContent(t, r)
			for _, id := range ids {
				p := q.partitionOf(id)
				want := redisconn.Slot(p.key())
				found := naming(content, id)
				if len(found) == 0 {
					t.Errorf("%s: no key names %s", stage, id)
				}
				for _, tr := range found {
					if slot := redisconn.Slot(tr.key); slot != want {
						t.Errorf("%s: %s of partition %d (slot %d) is named in %s, of slot %d", stage, id, p.number, want, tr.what, slot)
					}
					if r.cluster != nil && tr.primary != r.cluster.SlotOwner(t, want) {
						t.Errorf("%s: %s is on %s, not on its slot's primary %s", stage, tr.key, tr.primary, r.cluster.SlotOwner(t, want))
					}
				}
			}
			for _, tr := range naming(content, topics...) {
				if !slices.ContainsFunc(q.partitions, func(p *partition) bool { return redisconn.Slot(p.key()) == redisconn.Slot(tr.key) }) {
					t.Errorf("%s: %s names a topic, in no partition's slot", stage, tr.what)
				}
			}
		}

		// Pushed: the first job delayed, the others ready.
		jobs[0].Delay = 300 * time.Millisecond
		if _, err := q.PushBatch(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		inSlot("pushed", ids...)
		for _, job := range jobs {
			info, err := q.Get(ctx, job.ID)
			if err != nil || info == nil || info.Topic != job.Topic || info.Body != job.Body {
				t.Fatalf("get %s = %+v, %v", job.ID, info, err)
			}
		}
		stats, err := q.Stats(ctx, "")
		if err != nil || stats["a{b}c"] != (TopicStats{Delay: 1, Ready: 1}) || stats["{!"] != (TopicStats{Ready: 1}) {
			t.Fatalf("stats = %+v, %v", stats, err)
		}

		// Popped, the delayed one by a held pop once the scanner moved it.
		got := map[string]*Delivery{}
		for len(got) < len(jobs) {
			d := mustPop(t, q, 5*time.Second, topics...)
			if d == nil {
				t.Fatalf("pop after %d of %d jobs found nothing", len(got), len(jobs))
			}
			got[d.ID] = d
		}
		for _, job := range jobs {
			if d := got[job.ID]; d == nil || d.Topic != job.Topic || d.Body != job.Body || d.Attempts != 1 {
				t.Fatalf("popped %s as %+v", job.ID, d)
			}
		}
		inSlot("reserved", ids...)
		if _, _, err := q.Touch(ctx, "{x}y}", 1); err != nil {
			t.Fatalf("touch: %v", err)
		}
		zero := time.Duration(0)
		if state, _, err := q.Release(ctx, "}{", &zero, 1); err != nil || state != StateReady {
			t.Fatalf("release }{ = %s, %v", state, err)
		}
		if d := mustPop(t, q, 5*time.Second, "{!"); d == nil || d.ID != "}{" || d.Attempts != 2 {
			t.Fatalf("pop after release = %+v", d)
		}
		if statuses, err := q.FinishBatch(ctx, []string{"{x}y}", "{}"}); err != nil || fmt.Sprint(statuses) != fmt.Sprint([]RemoveStatus{Removed, Removed}) {
			t.Fatalf("finish = %v, %v", statuses, err)
		}

		// Their last attempts released: dead letters.
		dead := []string{"}{", "{a}b{c}", "{z"}
		for _, id := range dead {
			if state, _, err := q.Release(ctx, id, nil, got[id].Attempts+strings.Count(id, "}{")); err != nil || state != StateDead {
				t.Fatalf("release %s = %s, %v", id, state, err)
			}
		}
		inSlot("dead", dead...)
		for _, job := range jobs[2:] {
			list, total, err := q.DeadList(ctx, job.Topic, 0, 10)
			if err != nil || total != 1 || len(list) != 1 || list[0].ID != job.ID {
				t.Fatalf("dead list of %s = %+v, %d, %v", job.Topic, list, total, err)
			}
		}
		if kicked, err := q.DeadKick(ctx, "}x{y}", "{a}b{c}", 0); err != nil || !slices.Equal(kicked, []string{"{a}b{c}"}) {
			t.Fatalf("kick by id = %v, %v", kicked, err)
		}
		if kicked, err := q.DeadKick(ctx, "{!", "", 1); err != nil || !slices.Equal(kicked, []string{"}{"}) {
			t.Fatalf("kick the oldest = %v, %v", kicked, err)
		}
		inSlot("kicked", "{a}b{c}", "}{")
		for _, topic := range []string{"}x{y}", "{!"} {
			d := mustPop(t, q, 5*time.Second, topic)
			if d == nil || d.Attempts != 1 {
				t.Fatalf("pop of a kicked job of %s = %+v", topic, d)
			}
			if err := q.Finish(ctx, d.ID); err != nil {
				t.Fatal(err)
			}
		}
		if n, err := q.DeadDelete(ctx, "{q}", "{z"); err != nil || n != 1 {
			t.Fatalf("dead delete by id = %d, %v", n, err)
		}

		if topics, err := q.Topics(ctx); err != nil || len(topics) != 0 {
			t.Fatalf("topics after every job ended: %v, %v", topics, err)
		}
		assertNoTraces(t, r, "{x}y}", "{}", "}{", "{a}b{c}", "{z", "a{b}c", "{!", "}x{y}", "{q}")
	})
}

// When every node of the cluster is gone, a Pop gives up about as soon as
// a call on one partition does (a Get), not after one such give-up per
// partition it tries: with the cluster default of 12 partitions that
// would keep a consumer's pop, even of hold 0, waiting twelve times as
// long, far beyond any hold. On a cluster of its own: it kills the nodes.
func TestPopOnAClusterDownGivesUpLikeOneCall(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	q := newTestQueue(t, onCluster(c), func(o *Options) { o.BucketSize = defaults.ClusterBucketSize })
	ctx := context.Background()
	for _, n := range c.Nodes {
		n.Kill()
	}
	var oneCall time.Duration
	for range 2 { // the first after the kill may be cut short by a connection error
		start := time.Now()
		if _, err := q.Get(ctx, "some-id"); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("get with every node gone: %v, want ErrUnavailable", err)
		}
		oneCall = max(oneCall, time.Since(start))
	}
	start := time.Now()
	_, err := q.Pop(ctx, []string{"t"}, 0)
	took := time.Since(start)
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("pop with every node gone: %v, want ErrUnavailable", err)
	}
	if took > 3*oneCall+time.Second {
		t.Fatalf("pop took %v to give up, a call on one partition %v: it waited out each of %d partitions", took, oneCall, len(q.partitions))
	}
}

// Pops share the cursor's partition, which moves on when it runs short or
// after claimStint claims: with a backlog in every partition, pops come in
// runs of claimStint from one partition, and every partition has its turn.
func TestPopsTakeTurnsOverThePartitions(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		q := newTestQueue(t, r)
		ctx := context.Background()
		perPartition := 2 * claimStint
		ids := idsPerPartition(t, q, "turn-", perPartition)
		jobs := make([]Job, len(ids))
		for i, id := range ids {
			jobs[i] = Job{Topic: "turns", ID: id, TTR: time.Minute}
		}
		if _, err := q.PushBatch(ctx, jobs); err != nil {
			t.Fatal(err)
		}
		var got []int
		for range len(ids) {
			d := mustPop(t, q, 0, "turns")
			if d == nil {
				t.Fatalf("a pop found nothing after %v", got)
			}
			got = append(got, q.partitionOf(d.ID).number)
		}
		// The first pop of the queue starts a stint: runs are claimStint
		// long, one partition after the other.
		for i := 0; i < len(got); i += claimStint {
			for _, n := range got[i : i+claimStint] {
				if n != got[i] {
					t.Fatalf("pops took from partitions %v, want runs of %d", got, claimStint)
				}
			}
		}
		from := map[int]int{}
		for _, n := range got {
			from[n]++
		}
		for n := 1; n <= len(q.partitions); n++ {
			if from[n] != perPartition {
				t.Fatalf("pops took %v per partition, want %d each", from, perPartition)
			}
		}
	})
}

// The partitions on one Redis server share its script calls' slots: one
// group per server, with singleSlots single-call slots while it holds at
// most that many partitions and crowdedSingleSlots when it holds more.
func TestPartitionsShareTheirServersSlots(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, r *testRedis) {
		rdb := r.client(t)
		for _, size := range []int{1, 3, 12} {
			q := newQueue(t, rdb, r.queueOptions(Options{BucketSize: size, BucketName: "dq_bucket_%d",
				QueueName: "dq_queue_%s"}), redistest.Logger(t))
			held := map[string]int{}
			groups := map[string]*slotGroup[pushCall, pushReply]{}
			for _, p := range q.partitions {
				server := serverOf(rdb, p.key())
				held[server]++
				g := p.pushes.single.group
				if groups[server] == nil {
					groups[server] = g
				} else if groups[server] != g {
					t.Fatalf("%d partitions: two partitions on server %q have slots of their own", size, server)
				}
				if p.claims.single.group.slots != g.slots || p.finishes.single.group.slots != g.slots ||
					p.deletes.single.group.slots != g.slots {
					t.Fatalf("%d partitions: the kinds of calls of partition %d have different slots", size, p.number)
				}
			}
			if r.cluster == nil && len(groups) != 1 {
				t.Fatalf("%d partitions on one Redis: %d slot groups, want 1", size, len(groups))
			}
			for server, g := range groups {
				want := singleSlots
				if held[server] > singleSlots {
					want = crowdedSingleSlots
				}
				if g.slots != want {
					t.Errorf("%d partitions: a server holding %d has %d single-call slots, want %d",
						size, held[server], g.slots, want)
				}
			}
			if r.cluster == nil && size == 12 && groups[""].slots != crowdedSingleSlots {
				t.Errorf("12 partitions on one Redis: %d single-call slots, want %d", groups[""].slots, crowdedSingleSlots)
			}
		}
	})
}

// A cluster that is down (a slot no primary serves, with the default
// cluster-require-full-coverage) is not ready, though its nodes still
// answer FUNCTION and SCRIPT; once the slot is served again, it is. On a
// cluster of its own: it takes a slot away.
func TestNotReadyWhileTheClusterIsDown(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	q := newTestQueue(t, onCluster(c))
	ctx := context.Background()
	if err := q.Ready(ctx); err != nil {
		t.Fatalf("ready before: %v", err)
	}
	slot := redisconn.Slot(q.partitions[0].key())
	owner := c.Node(c.SlotOwner(t, slot))
	state := func() string {
		info, _ := redis.String(owner.Do("CLUSTER", "INFO"))
		return info
	}
	if _, err := owner.Do("CLUSTER", "DELSLOTS", slot); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "cluster_state:fail at "+owner.Addr, func() bool {
		return strings.Contains(state(), "cluster_state:fail")
	})
	if err := q.Ready(ctx); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("ready while the cluster is down = %v, want ErrUnavailable", err)
	}
	if _, err := owner.Do("CLUSTER", "ADDSLOTS", slot); err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, 10*time.Second, "the cluster ready again", func() bool { return q.Ready(ctx) == nil })
}
