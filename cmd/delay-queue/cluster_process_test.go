package main

// Process tests on a Redis Cluster: the built server binary against a real
// cluster that each test starts (internal/redistest.StartCluster), driven
// through its HTTP API while servers, primaries and slots are taken away.
// The load driver here (procLoad) pushes jobs through several servers and
// pops and finishes them through them, retrying what the test allows, and
// accounts for every acknowledged push.

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

// procClusterPartitions is the partition count of the servers in these
// tests: their confs leave bucket_size unset, so a new cluster gets the
// cluster default.
const procClusterPartitions = defaults.ClusterBucketSize

// The answers a client is told to retry (routers/envelope.go).
const (
	procMsgUnavailable   = "redis unavailable, try again"
	procMsgNotReplicated = "not confirmed by enough redis replicas (wait_replicas), try again"
)

// procPartitionOf is the partition of id among count, by the engine's rule
// (delayqueue/keys.go partitionNumber): crc32 of the id, numbered from 1.
func procPartitionOf(id string, count int) int {
	return int(crc32.ChecksumIEEE([]byte(id))%uint32(count)) + 1
}

// procPartitionTag is the hash tag of partition n of count for the default
// bucket_name, by the engine's rule (delayqueue/keys.go partitionTag):
// "{dq_bucket_<n>}", or the bucket name with the first suffix ".1", ".2"...
// whose slot lies in the middle half of the n-th of count equal ranges of
// the slot space. procCheckPartitionTags checks it against the keys a
// server wrote, so that a change of the rule fails loudly here rather than
// making the tests move the wrong slots.
func procPartitionTag(n, count int) string {
	name := fmt.Sprintf("dq_bucket_%d", n)
	width := redisconn.SlotCount / count
	lo := (n-1)*redisconn.SlotCount/count + width/4
	hi := (n-1)*redisconn.SlotCount/count + width - width/4
	candidate := name
	for i := 1; ; i++ {
		if s := redisconn.Slot("{" + candidate + "}"); s >= lo && s < hi {
			return "{" + candidate + "}"
		}
		candidate = name + "." + strconv.Itoa(i)
	}
}

// procIDsPerPartition returns perPartition ids "<prefix>-<i>" of each
// partition: ids[n-1] are partition n's.
func procIDsPerPartition(prefix string, count, perPartition int) [][]string {
	ids := make([][]string, count)
	for i, found := 0, 0; found < count*perPartition; i++ {
		id := prefix + "-" + strconv.Itoa(i)
		p := procPartitionOf(id, count) - 1
		if len(ids[p]) < perPartition {
			ids[p] = append(ids[p], id)
			found++
		}
	}
	return ids
}

// procCheckPartitionTags checks that ids[n-1][0], pushed, is in the jobs
// hash of partition n, under the tag procPartitionTag computes, on the
// primary serving that tag's slot.
func procCheckPartitionTags(t *testing.T, cluster *redistest.Cluster, ids [][]string) {
	t.Helper()
	for i, partitionIDs := range ids {
		tag := procPartitionTag(i+1, len(ids))
		owner := cluster.SlotOwner(t, redisconn.Slot(tag))
		key := tag + "dq_jobs"
		found, err := redis.Bool(cluster.Node(owner).Do("HEXISTS", key, partitionIDs[0]))
		if err != nil || !found {
			t.Fatalf("partition %d: job %s not in %s on %s (%v, %v): the test's copy of the partition rules no longer matches the engine's",
				i+1, partitionIDs[0], key, owner, found, err)
		}
	}
}

// procPartitionsOn returns the partitions (of count) whose tags' slots the
// primary at addr serves.
func procPartitionsOn(t *testing.T, cluster *redistest.Cluster, addr string, count int) []int {
	t.Helper()
	var on []int
	for n := 1; n <= count; n++ {
		if cluster.SlotOwner(t, redisconn.Slot(procPartitionTag(n, count))) == addr {
			on = append(on, n)
		}
	}
	return on
}

// procRedirects sums a redirect counter of /metrics over servers.
func procRedirects(t *testing.T, servers []*procServer, kind string) float64 {
	t.Helper()
	total := 0.0
	for _, s := range servers {
		total += max(0, procMetric(t, s, `delayqueue_redis_redirects_total{kind="`+kind+`"}`))
	}
	return total
}

// procWaitCondition polls cond until it holds, failing the test after
// within.
func procWaitCondition(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// procData decodes env's data into v.
func procData(t *testing.T, env procEnvelope, v any) {
	t.Helper()
	if err := json.Unmarshal(env.Data, v); err != nil {
		t.Fatalf("decode data %s: %v", env.Data, err)
	}
}

// procClusterGet is /get of id through s: nil for data null.
func procClusterGet(t *testing.T, api *procClient, s *procServer, id string) *wire.JobInfo {
	t.Helper()
	env := api.mustOK(t, s, "/get", wire.IDRequest{ID: id})
	if env.dataIsNull() {
		return nil
	}
	var job wire.JobInfo
	procData(t, env, &job)
	return &job
}

// procClusterStats is /stats of one topic through s.
func procClusterStats(t *testing.T, api *procClient, s *procServer, topic string) map[string]int64 {
	t.Helper()
	var stats map[string]map[string]int64
	procData(t, api.mustOK(t, s, "/stats", map[string]string{"topic": topic}), &stats)
	return stats[topic]
}

// procLoadConfig says what a procLoad does.
type procLoadConfig struct {
	servers   []*procServer
	jobs      []procPush
	topics    []string
	producers int
	consumers int
	// pushInterval paces each producer, so that the events a test causes
	// land while jobs are still being pushed.
	pushInterval time.Duration
	// exactlyOnce: the jobs' ttr outlasts the run, so any second delivery
	// is a duplicate.
	exactlyOnce bool
	// retryable lists the failures a call may meet and retry ("transport"
	// for an error below HTTP, else the code-1 message); any other failure
	// is an error of the test (and is retried too, so that the accounting
	// stays whole).
	retryable []string
	// bursts are more jobs, pushed at full speed when the test asks
	// (procLoad.burst).
	bursts [][]procPush
}

// procLoad is a run of producers and consumers over several servers. Every
// push is retried until acknowledged; every delivered job is finished
// through another server than the one that delivered it, retried until
// acknowledged.
type procLoad struct {
	t    *testing.T
	cfg  procLoadConfig
	api  *procClient
	byID map[string]procPush

	ctx           context.Context
	cancel        context.CancelFunc
	stopConsumers context.CancelFunc
	producers     sync.WaitGroup
	consumers     sync.WaitGroup

	ackedMu    sync.Mutex
	acked      map[string]bool
	ackedCount atomic.Int64
	expected   atomic.Int64 // the jobs of cfg.jobs and of the bursts started
	deliveries *procDeliveries
	failures   procFailures

	retriesMu sync.Mutex
	retries   map[string]int // reason -> calls retried for it

	started time.Time
}

// startProcLoad starts the producers and consumers; the run is bounded by
// within and stopped when the test ends.
func startProcLoad(t *testing.T, api *procClient, cfg procLoadConfig, within time.Duration) *procLoad {
	l := &procLoad{
		t: t, cfg: cfg, api: api,
		byID:       make(map[string]procPush, len(cfg.jobs)),
		acked:      make(map[string]bool, len(cfg.jobs)),
		deliveries: newProcDeliveries(-1),
		retries:    make(map[string]int),
	}
	for _, job := range cfg.jobs {
		l.byID[job.ID] = job
	}
	for _, burst := range cfg.bursts {
		for _, job := range burst {
			l.byID[job.ID] = job
		}
	}
	l.expected.Store(int64(len(cfg.jobs)))
	l.started = time.Now()
	l.ctx, l.cancel = context.WithTimeout(context.Background(), within)
	consumerCtx, stopConsumers := context.WithCancel(l.ctx)
	l.stopConsumers = stopConsumers
	t.Cleanup(func() {
		l.cancel()
		l.producers.Wait()
		l.consumers.Wait()
	})
	for p := range cfg.producers {
		l.producers.Add(1)
		go l.produce(p)
	}
	for c := range cfg.consumers {
		l.consumers.Add(1)
		go l.consume(consumerCtx, c)
	}
	return l
}

// pause paces a retry; it waits for no event.
func (l *procLoad) pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(20 * time.Millisecond):
	}
}

// result classifies one answer: "" for status 200 and code 0, else the
// reason it failed, which is counted and checked against cfg.retryable.
func (l *procLoad) result(what string, env procEnvelope, status int, err error) string {
	reason := ""
	switch {
	case err != nil:
		reason = "transport"
	case status != http.StatusOK:
		reason = fmt.Sprintf("status %d", status)
	case env.Code != 0:
		reason = env.Message
	default:
		return ""
	}
	l.retriesMu.Lock()
	l.retries[reason]++
	l.retriesMu.Unlock()
	if !slices.Contains(l.cfg.retryable, reason) {
		l.failures.add("%s: status %d, code %d, message %q, error %v", what, status, env.Code, env.Message, err)
	}
	return reason
}

func (l *procLoad) produce(p int) {
	defer l.producers.Done()
	ticker := time.NewTicker(l.cfg.pushInterval)
	defer ticker.Stop()
	for i := p; i < len(l.cfg.jobs); i += l.cfg.producers {
		select {
		case <-l.ctx.Done():
			return
		case <-ticker.C:
		}
		l.push(l.cfg.jobs[i], i)
	}
}

// push pushes job, first through servers[first], until acknowledged.
func (l *procLoad) push(job procPush, first int) {
	for attempt := 0; l.ctx.Err() == nil; attempt++ {
		srv := l.cfg.servers[(first+attempt)%len(l.cfg.servers)]
		env, status, err := l.api.call(srv.baseURL, "/push", job, procCallTimeout)
		if l.result("push "+job.ID+" via "+srv.name, env, status, err) != "" {
			l.pause(l.ctx)
			continue
		}
		l.ackedMu.Lock()
		l.acked[job.ID] = true
		l.ackedMu.Unlock()
		l.ackedCount.Add(1)
		return
	}
}

// burst pushes cfg.bursts[k] through servers[first] with 8 pushers at full
// speed, so that an event can land while the servers are busy claiming
// and answering jobs rather than holding idle pops. It returns the count
// of the burst's acknowledged pushes.
func (l *procLoad) burst(k, first int) *atomic.Int64 {
	jobs := l.cfg.bursts[k]
	l.expected.Add(int64(len(jobs)))
	acked := new(atomic.Int64)
	for w := range 8 {
		l.producers.Add(1)
		go func() {
			defer l.producers.Done()
			for j := w; j < len(jobs); j += 8 {
				l.push(jobs[j], first)
				acked.Add(1)
			}
		}()
	}
	return acked
}

func (l *procLoad) consume(ctx context.Context, c int) {
	defer l.consumers.Done()
	servers := l.cfg.servers
	// Each consumer lists the topics in its own order, so that the first
	// listed topic spreads over them.
	k := c % len(l.cfg.topics)
	topicList := strings.Join(append(slices.Clone(l.cfg.topics[k:]), l.cfg.topics[:k]...), ",")
	home := c % len(servers)
	which := home
	for ctx.Err() == nil {
		srv := servers[which]
		env, status, err := l.api.call(srv.baseURL, "/pop", wire.PopRequest{Topic: topicList, Timeout: 1}, procCallTimeout)
		if reason := l.result("pop via "+srv.name, env, status, err); reason != "" {
			if ctx.Err() != nil {
				return
			}
			// After a transport error try the next server, then come
			// back home, so that a killed server's consumers return.
			if reason == "transport" && which == home {
				which = (home + 1) % len(servers)
			} else {
				which = home
				l.pause(ctx)
			}
			continue
		}
		which = home
		if env.dataIsNull() {
			continue
		}
		var job procPopped
		if err := json.Unmarshal(env.Data, &job); err != nil {
			l.failures.add("pop via %s: decode data %s: %v", srv.name, env.Data, err)
			continue
		}
		n := l.deliveries.delivered(job.ID)
		want, known := l.byID[job.ID]
		switch {
		case !known:
			l.failures.add("pop via %s: delivered unknown id %q", srv.name, job.ID)
		case job.Body != want.Body || job.Topic != want.Topic || job.TTR != want.TTR:
			l.failures.add("pop via %s: delivered %+v, pushed %+v", srv.name, job, want)
		case l.cfg.exactlyOnce && (n > 1 || job.Attempts != 1):
			l.failures.add("pop via %s: %s delivered again within its ttr (delivery %d, attempts %d)", srv.name, job.ID, n, job.Attempts)
		}
		l.finish(ctx, job.ID, (which+1)%len(servers))
	}
}

// finish finishes id, first through servers[first], until acknowledged.
func (l *procLoad) finish(ctx context.Context, id string, first int) {
	for attempt := 0; ctx.Err() == nil; attempt++ {
		srv := l.cfg.servers[(first+attempt)%len(l.cfg.servers)]
		env, status, err := l.api.call(srv.baseURL, "/finish", wire.IDRequest{ID: id}, procCallTimeout)
		if l.result("finish "+id+" via "+srv.name, env, status, err) != "" {
			l.pause(ctx)
			continue
		}
		l.deliveries.markFinished(id)
		return
	}
}

// waitAcked waits until n pushes are acknowledged.
func (l *procLoad) waitAcked(n int, within time.Duration) {
	l.t.Helper()
	procWaitCondition(l.t, within, fmt.Sprintf("%d acknowledged pushes (have %d)", n, l.ackedCount.Load()),
		func() bool { return l.ackedCount.Load() >= int64(n) })
}

// drain waits for the producers, then until every acknowledged push was
// finished (or within passes), stops the consumers and checks the run.
func (l *procLoad) drain(within time.Duration) {
	t := l.t
	t.Helper()
	l.producers.Wait()
	pushed := time.Now()
	expected := int(l.expected.Load())
	if l.ctx.Err() != nil {
		t.Fatalf("producers did not finish in time: %d of %d pushes acknowledged", l.ackedCount.Load(), expected)
	}
	l.ackedMu.Lock()
	acked := make([]string, 0, len(l.acked))
	for id := range l.acked {
		acked = append(acked, id)
	}
	l.ackedMu.Unlock()
	deadline := time.Now().Add(within)
	var unfinished []string
	for {
		_, finished, _ := l.deliveries.snapshot()
		unfinished = unfinished[:0]
		for _, id := range acked {
			if !finished[id] {
				unfinished = append(unfinished, id)
			}
		}
		if len(unfinished) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling interval for the condition
	}
	t.Logf("every push acknowledged %v after the start, every job finished %v later",
		pushed.Sub(l.started).Round(time.Millisecond), time.Since(pushed).Round(time.Millisecond))
	l.stopConsumers()
	l.consumers.Wait()

	if l.cfg.exactlyOnce {
		// Everything is finished: a held pop must come back empty, or a
		// stale entry is still being handed out.
		var pops sync.WaitGroup
		for _, srv := range l.cfg.servers {
			pops.Add(1)
			go func() {
				defer pops.Done()
				job, _, err := l.api.pop(srv, strings.Join(l.cfg.topics, ","), 1)
				if err != nil || job != nil {
					t.Errorf("%s: /pop after every job was finished = %+v, %v; want data null", srv.name, job, err)
				}
			}()
		}
		pops.Wait()
	}

	counts, _, total := l.deliveries.snapshot()
	var lost, notFinished, duplicated []string
	for _, id := range unfinished {
		if counts[id] == 0 {
			lost = append(lost, id)
		} else {
			notFinished = append(notFinished, id)
		}
	}
	duplicates := 0
	for id, n := range counts {
		duplicates += n - 1
		if n > 1 {
			duplicated = append(duplicated, fmt.Sprintf("%s×%d", id, n))
		}
	}
	l.retriesMu.Lock()
	t.Logf("%d of %d pushes acknowledged; %d deliveries of %d distinct jobs (%d duplicates); retried calls by reason: %v",
		len(acked), expected, total, len(counts), duplicates, l.retries)
	l.retriesMu.Unlock()
	l.failures.report(t, "failed or wrong answers")
	if len(acked) != expected {
		t.Errorf("%d of %d pushes acknowledged", len(acked), expected)
	}
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged jobs lost (never delivered within %v of the last push), e.g. %v", len(lost), len(acked), within, procFirstN(lost, 10))
	}
	if len(notFinished) > 0 {
		t.Errorf("%d acknowledged jobs delivered but never finished with code 0, e.g. %v", len(notFinished), procFirstN(notFinished, 10))
	}
	if l.cfg.exactlyOnce && len(duplicated) > 0 {
		t.Errorf("%d jobs delivered more than once within their ttr, e.g. %v", len(duplicated), procFirstN(duplicated, 10))
	}
}

// procLoadJobs are count jobs "<prefix>-<i>" over topics, a quarter of
// them with a delay of up to 1.5 s so that the scanners move them.
func procLoadJobs(prefix string, count int, topics []string, ttr int64) []procPush {
	jobs := make([]procPush, count)
	for i := range jobs {
		jobs[i] = procPush{
			Topic: topics[i%len(topics)],
			ID:    prefix + "-" + strconv.Itoa(i),
			TTR:   ttr,
			Body:  prefix + " body " + strconv.Itoa(i),
		}
		if i%4 == 0 {
			jobs[i].DelayMS = procInt64(int64(i*7) % 1500)
		}
	}
	return jobs
}

// startProcClusterServer starts a server on the cluster whose seed nodes
// are seeds.
func startProcClusterServer(t *testing.T, name string, seeds []string, extra ...string) *procServer {
	t.Helper()
	s := newProcClusterServer(t, name, seeds, extra...)
	s.Start()
	return s
}

// procFlatten joins ids per partition into one list, partition by
// partition.
func procFlatten(ids [][]string) []string {
	var all []string
	for _, p := range ids {
		all = append(all, p...)
	}
	return all
}

// procSameIDs reports whether got and want hold the same ids, each once.
func procSameIDs(got, want []string) bool {
	return len(got) == len(want) && slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
}

// procPopAll pops topic with count through s until want jobs are out (or
// within passes) and returns them.
func procPopAll(t *testing.T, api *procClient, s *procServer, topic string, want int, within time.Duration) []procPopped {
	t.Helper()
	var got []procPopped
	deadline := time.Now().Add(within)
	for len(got) < want {
		if time.Now().After(deadline) {
			t.Fatalf("/pop %s with count: %d of %d jobs within %v", topic, len(got), want, within)
		}
		env := api.mustOK(t, s, "/pop", map[string]any{"topic": topic, "count": 10, "timeout": 1})
		var batch []procPopped
		procData(t, env, &batch)
		if batch == nil {
			t.Fatalf("/pop with count answered %s, want an array", env.Data)
		}
		got = append(got, batch...)
	}
	return got
}

// procPoppedIDs are the ids of jobs.
func procPoppedIDs(jobs []procPopped) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// procUpcomingTotal is the sum of /upcoming's counts for the next minutes.
func procUpcomingTotal(t *testing.T, api *procClient, s *procServer, minutes int) (int64, []int64) {
	t.Helper()
	var up wire.Upcoming
	procData(t, api.mustOK(t, s, "/upcoming", map[string]int{"minutes": minutes}), &up)
	if up.StepSeconds != 60 || len(up.Counts) != minutes {
		t.Fatalf("/upcoming on %s: step %d s and %d counts, want 60 s and %d", s.name, up.StepSeconds, len(up.Counts), minutes)
	}
	var total int64
	for _, c := range up.Counts {
		total += c
	}
	return total, up.Counts
}

// TestProcessClusterEndpoints walks every endpoint through two servers on
// one cluster, with jobs in every partition, and checks that the answers
// are those of one Redis: what one server stores the other serves, batches
// and listings span the partitions, and held pops are woken from every
// partition.
func TestProcessClusterEndpoints(t *testing.T) {
	const n = procClusterPartitions
	cluster := redistest.StartCluster(t, 3, 0)
	a := startProcClusterServer(t, "A", cluster.Addrs())
	// One seed is enough: B learns the other nodes from it.
	b := startProcClusterServer(t, "B", cluster.Addrs()[:1])
	servers := []*procServer{a, b}
	api := newProcClient()
	defer api.close()
	for _, s := range servers {
		procWaitStatus(t, s, "/readyz", 200, 15*time.Second)
	}
	checkStats := func(s *procServer, topic string, want map[string]int64) {
		t.Helper()
		got := procClusterStats(t, api, s, topic)
		for _, state := range []string{"delay", "ready", "reserved", "dead"} {
			if got[state] != want[state] {
				t.Fatalf("/stats %s on %s = %v, want %v", topic, s.name, got, want)
			}
		}
	}

	// Single pushes through both servers, one job in each partition; /get
	// through the other server sees each.
	single := procIDsPerPartition("single", n, 1)
	for i, id := range procFlatten(single) {
		env := api.mustOK(t, servers[i%2], "/push", procPush{Topic: "ep-single", ID: id, TTR: 30, Body: "body of " + id})
		if env.Message != "pushed" {
			t.Fatalf("push %s answered %q", id, env.Message)
		}
		job := procClusterGet(t, api, servers[(i+1)%2], id)
		if job == nil || job.Topic != "ep-single" || job.Body != "body of "+id ||
			(job.State != "ready" && job.State != "delay") || job.Attempts != 0 {
			t.Fatalf("/get %s after push: %+v", id, job)
		}
	}
	procCheckPartitionTags(t, cluster, single)
	checkStats(b, "ep-single", map[string]int64{"ready": n})

	// Single pops through B; half finished one by one through A, the rest
	// by ids through B.
	var popped []string
	for range n {
		job := api.mustPop(t, b, "ep-single", 2)
		if job == nil {
			t.Fatalf("/pop ep-single: data null after %d of %d jobs", len(popped), n)
		}
		if job.Attempts != 1 || job.Body != "body of "+job.ID || job.TTR != 30 {
			t.Fatalf("/pop ep-single = %+v", *job)
		}
		popped = append(popped, job.ID)
	}
	if !procSameIDs(popped, procFlatten(single)) {
		t.Fatalf("popped %v, pushed %v", popped, procFlatten(single))
	}
	if job := api.mustPop(t, a, "ep-single", 0); job != nil {
		t.Fatalf("/pop ep-single after every job was popped = %+v", *job)
	}
	checkStats(a, "ep-single", map[string]int64{"reserved": n})
	for _, id := range popped[:n/2] {
		if env := api.mustOK(t, a, "/finish", wire.IDRequest{ID: id}); env.Message != "finished" {
			t.Fatalf("finish %s answered %q", id, env.Message)
		}
	}
	if env := api.mustOK(t, b, "/finish", map[string]any{"ids": popped[n/2:]}); string(env.Data) != fmt.Sprintf(`{"finished":%d,"dead":[]}`, n-n/2) {
		t.Fatalf("finish ids answered %s", env.Data)
	}
	for _, id := range popped {
		if job := procClusterGet(t, api, a, id); job != nil {
			t.Fatalf("/get %s after finish: %+v", id, job)
		}
	}

	// Held pops on A, each woken by a push through B into another
	// partition.
	held := procIDsPerPartition("held", n, 1)
	type heldResult struct {
		job *procPopped
		err error
	}
	results := make(chan heldResult, n)
	for range n {
		go func() {
			job, _, err := api.pop(a, "ep-held", 30)
			results <- heldResult{job, err}
		}()
	}
	procWaitCondition(t, 10*time.Second, fmt.Sprintf("%d pops held on A", n), func() bool {
		return procMetric(t, a, "delayqueue_held_pops") == n
	})
	for _, id := range procFlatten(held) {
		api.mustPush(t, b, procPush{Topic: "ep-held", ID: id, TTR: 30, Body: id})
	}
	var woken []string
	for range n {
		select {
		case r := <-results:
			if r.err != nil || r.job == nil {
				t.Fatalf("held pop on A: %+v, %v", r.job, r.err)
			}
			woken = append(woken, r.job.ID)
		case <-time.After(15 * time.Second):
			t.Fatalf("held pops on A: %d of %d answered within 15 s of the pushes: %v", len(woken), n, woken)
		}
	}
	if !procSameIDs(woken, procFlatten(held)) {
		t.Fatalf("held pops got %v, pushed %v", woken, procFlatten(held))
	}
	if env := api.mustOK(t, a, "/finish", map[string]any{"ids": woken}); string(env.Data) != fmt.Sprintf(`{"finished":%d,"dead":[]}`, n) {
		t.Fatalf("finish ids answered %s", env.Data)
	}

	// A batch spanning every partition through B; again with if_absent
	// through A, which leaves every job alone.
	batchIDs := procFlatten(procIDsPerPartition("batch", n, 2))
	jobs := make([]map[string]any, len(batchIDs))
	for i, id := range batchIDs {
		jobs[i] = map[string]any{"topic": "ep-batch", "id": id, "ttr": 30, "body": "b " + id}
	}
	checkBatch := func(env procEnvelope, status string) {
		t.Helper()
		var pushed []wire.PushResult
		procData(t, env, &pushed)
		if len(pushed) != len(batchIDs) {
			t.Fatalf("batch push answered %s", env.Data)
		}
		for i, p := range pushed {
			if p.ID != batchIDs[i] || p.Status != status {
				t.Fatalf("batch push: job %d answered %+v, want %s %s", i, p, batchIDs[i], status)
			}
		}
	}
	checkBatch(api.mustOK(t, b, "/push", map[string]any{"jobs": jobs}), "created")
	for _, job := range jobs {
		job["if_absent"], job["body"] = true, "changed"
	}
	checkBatch(api.mustOK(t, a, "/push", map[string]any{"jobs": jobs}), "exists")
	checkStats(a, "ep-batch", map[string]int64{"ready": int64(len(batchIDs))})
	var topics []string
	procData(t, api.mustOK(t, b, "/topics", map[string]any{}), &topics)
	var allStats map[string]json.RawMessage
	procData(t, api.mustOK(t, a, "/stats", map[string]any{}), &allStats)
	if !slices.Equal(topics, []string{"ep-batch"}) || len(allStats) != 1 || allStats["ep-batch"] == nil {
		t.Fatalf("/topics = %v and /stats = %v, want only ep-batch, the one topic with jobs", topics, allStats)
	}

	// Pops with count through A gather the batch from every partition.
	batchPopped := procPopAll(t, api, a, "ep-batch", len(batchIDs), 10*time.Second)
	for _, job := range batchPopped {
		if job.Attempts != 1 || job.Body != "b "+job.ID || job.Topic != "ep-batch" {
			t.Fatalf("/pop with count: %+v", job)
		}
	}
	if ids := procPoppedIDs(batchPopped); !procSameIDs(ids, batchIDs) {
		t.Fatalf("pops with count got %v, pushed %v", ids, batchIDs)
	}
	if env := api.mustOK(t, b, "/pop", map[string]any{"topic": "ep-batch", "count": 10, "timeout": 0}); string(env.Data) != "[]" {
		t.Fatalf("/pop with count of an empty topic answered %s", env.Data)
	}
	checkStats(b, "ep-batch", map[string]int64{"reserved": int64(len(batchIDs))})
	if env := api.mustOK(t, b, "/finish", map[string]any{"ids": batchIDs}); string(env.Data) != fmt.Sprintf(`{"finished":%d,"dead":[]}`, len(batchIDs)) {
		t.Fatalf("finish ids answered %s", env.Data)
	}
	checkStats(a, "ep-batch", nil)

	// Delayed jobs in every partition show in /upcoming; delete removes
	// them, one through A and the rest by ids through B.
	laterIDs := procFlatten(procIDsPerPartition("later", n, 1))
	for i, id := range laterIDs {
		api.mustPush(t, servers[i%2], procPush{Topic: "ep-later", ID: id, Delay: 3600, TTR: 30, Body: id})
	}
	checkStats(b, "ep-later", map[string]int64{"delay": n})
	if total, counts := procUpcomingTotal(t, api, b, 61); total != n || counts[59]+counts[60] != n {
		t.Fatalf("/upcoming with %d jobs due in an hour: %v", n, counts)
	}
	if env := api.mustOK(t, a, "/delete", wire.IDRequest{ID: laterIDs[0]}); env.Message != "deleted" {
		t.Fatalf("delete answered %q", env.Message)
	}
	if env := api.mustOK(t, b, "/delete", map[string]any{"ids": append(slices.Clone(laterIDs[1:]), "never-pushed")}); string(env.Data) != fmt.Sprintf(`{"deleted":%d}`, n-1) {
		t.Fatalf("delete ids answered %s", env.Data)
	}
	if total, counts := procUpcomingTotal(t, api, a, 61); total != 0 {
		t.Fatalf("/upcoming after the delayed jobs were deleted: %v", counts)
	}
	for _, id := range laterIDs {
		if job := procClusterGet(t, api, b, id); job != nil {
			t.Fatalf("/get %s after delete: %+v", id, job)
		}
	}

	// Touch and release in every partition, twice released with
	// max_attempts 2: dead letters in every partition.
	deadIDs := procFlatten(procIDsPerPartition("lease", n, 1))
	for i, id := range deadIDs {
		api.mustOK(t, servers[i%2], "/push", map[string]any{"topic": "ep-dead", "id": id, "ttr": 30, "max_attempts": 2, "body": id})
	}
	for attempt := 1; attempt <= 2; attempt++ {
		deliveries := procPopAll(t, api, servers[attempt%2], "ep-dead", n, 10*time.Second)
		if ids := procPoppedIDs(deliveries); !procSameIDs(ids, deadIDs) {
			t.Fatalf("delivery %d got %v, pushed %v", attempt, ids, deadIDs)
		}
		for i, d := range deliveries {
			if d.Attempts != attempt {
				t.Fatalf("delivery %d: %+v", attempt, d)
			}
			s := servers[i%2]
			var touched wire.TouchResult
			procData(t, api.mustOK(t, s, "/touch", map[string]any{"id": d.ID, "attempt": attempt}), &touched)
			if touched.LeaseUntilMS < time.Now().Add(25*time.Second).UnixMilli() {
				t.Fatalf("touch %s: lease until %d, want about 30 s from now", d.ID, touched.LeaseUntilMS)
			}
			var released wire.ReleaseResult
			procData(t, api.mustOK(t, servers[(i+1)%2], "/release", map[string]any{"id": d.ID, "attempt": attempt, "delay": 0}), &released)
			if want := map[int][]string{1: {"ready", "delay"}, 2: {"dead"}}[attempt]; !slices.Contains(want, released.State) {
				t.Fatalf("release %d of %s: state %q, want one of %v", attempt, d.ID, released.State, want)
			}
		}
	}
	checkStats(a, "ep-dead", map[string]int64{"dead": n})

	// /dead/list pages through every partition's dead letters, newest
	// first.
	var list []wire.DeadJob
	for offset := 0; offset < n; offset += 5 {
		var page wire.DeadPage
		procData(t, api.mustOK(t, servers[offset%2], "/dead/list", map[string]any{"topic": "ep-dead", "offset": offset, "limit": 5}), &page)
		if page.Total != n || len(page.Jobs) != min(5, n-offset) {
			t.Fatalf("/dead/list offset %d: total %d with %d jobs", offset, page.Total, len(page.Jobs))
		}
		list = append(list, page.Jobs...)
	}
	listIDs := make([]string, len(list))
	for i, d := range list {
		listIDs[i] = d.ID
		if d.Topic != "ep-dead" || d.Attempts != 2 || d.Reason != "released" {
			t.Fatalf("dead letter %+v", d)
		}
		if i > 0 && d.DeadAtMS > list[i-1].DeadAtMS {
			t.Fatalf("/dead/list is not newest first: %+v after %+v", d, list[i-1])
		}
	}
	if !procSameIDs(listIDs, deadIDs) {
		t.Fatalf("/dead/list pages hold %v, want %v", listIDs, deadIDs)
	}

	// Kick the newest by id through A and the three oldest through B.
	if env := api.mustOK(t, a, "/dead/kick", map[string]any{"topic": "ep-dead", "id": list[0].ID}); string(env.Data) != `{"kicked":["`+list[0].ID+`"]}` {
		t.Fatalf("kick %s answered %s", list[0].ID, env.Data)
	}
	var kicked wire.KickResult
	procData(t, api.mustOK(t, b, "/dead/kick", map[string]any{"topic": "ep-dead", "count": 3}), &kicked)
	deadAt := make(map[string]int64, n)
	for _, d := range list {
		deadAt[d.ID] = d.DeadAtMS
	}
	left := slices.DeleteFunc(slices.Clone(listIDs[1:]), func(id string) bool { return slices.Contains(kicked.Kicked, id) })
	if len(kicked.Kicked) != 3 || len(left) != n-4 {
		t.Fatalf("kick count 3 answered %v of %v", kicked.Kicked, listIDs)
	}
	for _, k := range kicked.Kicked {
		for _, id := range left {
			if deadAt[k] > deadAt[id] {
				t.Fatalf("kick count 3 kicked %s (dead at %d) before the older %s (dead at %d)", k, deadAt[k], id, deadAt[id])
			}
		}
	}
	checkStats(a, "ep-dead", map[string]int64{"ready": 4, "dead": n - 4})
	revived := procPopAll(t, api, a, "ep-dead", 4, 10*time.Second)
	if ids := procPoppedIDs(revived); !procSameIDs(ids, append(kicked.Kicked, list[0].ID)) {
		t.Fatalf("after the kicks popped %v, kicked %v and %s", ids, kicked.Kicked, list[0].ID)
	}
	api.mustOK(t, b, "/finish", map[string]any{"ids": procPoppedIDs(revived)})

	// Delete one dead letter through A, then all of them through B.
	if env := api.mustOK(t, a, "/dead/delete", map[string]any{"topic": "ep-dead", "id": left[0]}); string(env.Data) != `{"deleted":1}` {
		t.Fatalf("dead/delete %s answered %s", left[0], env.Data)
	}
	if env := api.mustOK(t, b, "/dead/delete", map[string]any{"topic": "ep-dead", "all": true}); string(env.Data) != fmt.Sprintf(`{"deleted":%d}`, n-5) {
		t.Fatalf("dead/delete all answered %s", env.Data)
	}
	if env := api.mustOK(t, a, "/dead/list", map[string]any{"topic": "ep-dead"}); string(env.Data) != `{"total":0,"jobs":[]}` {
		t.Fatalf("/dead/list after deleting all answered %s", env.Data)
	}
	checkStats(b, "ep-dead", nil)
	procData(t, api.mustOK(t, a, "/topics", map[string]any{}), &topics)
	if len(topics) != 0 {
		t.Fatalf("/topics with no job left = %v", topics)
	}

	// Both servers are ready, fetched the slot map, and counted what they
	// served.
	for _, s := range servers {
		if status, env := procReadyz(t, s); status != 200 {
			t.Errorf("/readyz on %s: %d %s", s.name, status, env.Message)
		}
		if v := procMetric(t, s, `delayqueue_redis_map_refreshes_total{result="ok"}`); v < 1 {
			t.Errorf("%s: delayqueue_redis_map_refreshes_total{result=\"ok\"} = %v, want at least 1", s.name, v)
		}
		if v := procMetric(t, s, `delayqueue_jobs_total{event="pushed",topic="ep-single"}`); v != n/2 {
			t.Errorf("%s: delayqueue_jobs_total{event=\"pushed\",topic=\"ep-single\"} = %v, want %d", s.name, v, n/2)
		}
	}
}

// TestProcessClusterTwoInstancesDeliverOnce runs two servers on one
// cluster and checks that every job, pushed through both and popped and
// finished through both, is delivered exactly once: the ttr outlasts the
// run, so a second delivery is a duplicate.
func TestProcessClusterTwoInstancesDeliverOnce(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	servers := []*procServer{
		startProcClusterServer(t, "A", cluster.Addrs()),
		startProcClusterServer(t, "B", cluster.Addrs()),
	}
	api := newProcClient()
	defer api.close()
	topics := []string{"twin-a", "twin-b", "twin-c"}
	load := startProcLoad(t, api, procLoadConfig{
		servers:      servers,
		jobs:         procLoadJobs("twin", 1000, topics, 60),
		topics:       topics,
		producers:    6,
		consumers:    12,
		pushInterval: time.Millisecond,
		exactlyOnce:  true,
	}, 90*time.Second)
	load.drain(30 * time.Second)
}

// TestProcessClusterKill9ServerUnderLoad kills one of two servers on a
// cluster with SIGKILL twice while jobs flow through both, each time in
// the middle of a burst of pushes through it, and restarts it: every acknowledged
// push is delivered and finished in the end. Deliveries lost with the
// killed server come back after their ttr, so duplicates are allowed.
func TestProcessClusterKill9ServerUnderLoad(t *testing.T) {
	const (
		jobCount  = 900
		kills     = 2
		burstSize = 200
	)
	cluster := redistest.StartCluster(t, 3, 0)
	victim := startProcClusterServer(t, "A", cluster.Addrs())
	survivor := startProcClusterServer(t, "B", cluster.Addrs())
	api := newProcClient()
	defer api.close()
	topics := []string{"crash-a", "crash-b", "crash-c"}
	bursts := make([][]procPush, kills)
	for k := range bursts {
		bursts[k] = procLoadJobs(fmt.Sprintf("crash-burst%d", k), burstSize, topics, 2)
	}
	load := startProcLoad(t, api, procLoadConfig{
		servers:   []*procServer{victim, survivor},
		jobs:      procLoadJobs("crash", jobCount, topics, 2),
		topics:    topics,
		producers: 4,
		consumers: 12,
		// About 200 pushes/s, so that the kills land in the run.
		pushInterval: 4 * 5 * time.Millisecond,
		retryable:    []string{"transport"},
		bursts:       bursts,
	}, 120*time.Second)
	for k := range kills {
		load.waitAcked((k+1)*jobCount/(kills+1), 30*time.Second)
		// The burst goes through the victim: the kill cuts pushes in flight,
		// which the producers retry through B.
		burstAcked := load.burst(k, 0)
		procWaitCondition(t, 30*time.Second, "half of a burst acknowledged", func() bool { return burstAcked.Load() >= burstSize/2 })
		victim.Kill()
		t.Logf("kill -9 #%d of server A after %d acknowledged pushes, in the middle of a burst", k+1, load.ackedCount.Load())
		victim.Start()
	}
	load.drain(45 * time.Second)
}

// procInfoField finds "name:value" in the text INFO returns.
func procInfoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// TestProcessClusterPrimaryFailover kills (SIGKILL) the primary of some
// partitions under load, on a cluster of 3 primaries with a replica each,
// with servers that WAIT for 1 replica before acknowledging a change:
//   - its replica takes over, and no acknowledged job is lost;
//   - the servers find the new primary by themselves: calls to the failed
//     shard's partitions succeed again once the slot map is refreshed;
//   - the promoted replica has no replica of its own, so changes there are
//     answered "not replicated" until the killed node, restarted, rejoins
//     as its replica; then acknowledged pushes there work again.
func TestProcessClusterPrimaryFailover(t *testing.T) {
	const (
		n        = procClusterPartitions
		jobCount = 600
	)
	cluster := redistest.StartCluster(t, 3, 1)
	conf := []string{"redis.wait_replicas = 1", "redis.wait_timeout_ms = 1000"}
	a := startProcClusterServer(t, "A", cluster.Addrs(), conf...)
	b := startProcClusterServer(t, "B", cluster.Addrs(), conf...)
	servers := []*procServer{a, b}
	api := newProcClient()
	defer api.close()
	topics := []string{"failover-a", "failover-b", "failover-c"}
	load := startProcLoad(t, api, procLoadConfig{
		servers:      servers,
		jobs:         procLoadJobs("failover", jobCount, topics, 5),
		topics:       topics,
		producers:    3,
		consumers:    9,
		pushInterval: 3 * 5 * time.Millisecond,
		retryable:    []string{procMsgUnavailable, procMsgNotReplicated},
	}, 120*time.Second)

	// The victim serves partition 1 and others; a probe id of partition 1
	// stands for the calls that go to it.
	slot := redisconn.Slot(procPartitionTag(1, n))
	victim := cluster.Node(cluster.SlotOwner(t, slot))
	failed := procPartitionsOn(t, cluster, victim.Addr, n)
	probe := procIDsPerPartition("probe", n, 1)[0][0]
	refreshesBefore := make([]float64, len(servers))
	for i, s := range servers {
		refreshesBefore[i] = procMetric(t, s, `delayqueue_redis_map_refreshes_total{result="ok"}`)
	}

	load.waitAcked(jobCount/3, 30*time.Second)
	cluster.WaitForReplicasUp(t)
	victim.Kill()
	killed := time.Now()
	since := func() time.Duration { return time.Since(killed).Round(time.Millisecond) }
	t.Logf("kill -9 of primary %s (partitions %v) after %d acknowledged pushes", victim.Addr, failed, load.ackedCount.Load())
	cluster.WaitStateOK(t)
	promoted := cluster.SlotOwner(t, slot)
	t.Logf("%v: %s took over", since(), promoted)

	// Calls to the failed shard succeed again on both servers.
	for i, s := range servers {
		procWaitCondition(t, 10*time.Second, "/get of a job of partition 1 through "+s.name, func() bool {
			env, status, err := api.call(s.baseURL, "/get", wire.IDRequest{ID: probe}, procCallTimeout)
			return err == nil && status == 200 && env.Code == 0
		})
		if v := procMetric(t, s, `delayqueue_redis_map_refreshes_total{result="ok"}`); v <= refreshesBefore[i] {
			t.Errorf("%s: the slot map was not fetched again after the failover (%v fetches)", s.name, v)
		}
	}
	t.Logf("%v: both servers reach partition 1 again", since())
	// WAIT 1 cannot succeed there: the promoted node has no replica.
	probeJob := procPush{Topic: "failover-probe", ID: probe, TTR: 30, Body: "probe"}
	for _, s := range servers {
		procWaitCondition(t, 20*time.Second, "a push to partition 1 through "+s.name+" answered not replicated", func() bool {
			env, status, err := api.call(s.baseURL, "/push", probeJob, procCallTimeout)
			if err == nil && status == 200 && env.Code == 0 {
				t.Fatalf("push to partition 1 through %s acknowledged while its primary %s has no replica to WAIT for", s.name, promoted)
			}
			return err == nil && env.Message == procMsgNotReplicated
		})
	}

	// The killed node comes back as the promoted node's replica; WAIT 1
	// succeeds again.
	t.Logf("%v: both servers answer not replicated for partition 1; restarting %s", since(), victim.Addr)
	victim.Restart(t)
	_, promotedPort, _ := strings.Cut(promoted, ":")
	procWaitCondition(t, 30*time.Second, "the restarted node "+victim.Addr+" replicating "+promoted, func() bool {
		info, err := redis.String(victim.Do("INFO", "replication"))
		return err == nil && procInfoField(info, "role") == "slave" &&
			procInfoField(info, "master_port") == promotedPort && procInfoField(info, "master_link_status") == "up"
	})
	cluster.WaitStateOK(t)
	for _, s := range servers {
		procWaitCondition(t, 20*time.Second, "an acknowledged push to partition 1 through "+s.name, func() bool {
			env, status, err := api.call(s.baseURL, "/push", probeJob, procCallTimeout)
			return err == nil && status == 200 && env.Code == 0
		})
	}
	if job := procClusterGet(t, api, a, probe); job == nil || job.Topic != "failover-probe" {
		t.Fatalf("/get of the probe after its push: %+v", job)
	}
	api.mustOK(t, b, "/delete", wire.IDRequest{ID: probe})
	t.Logf("%v: pushes to partition 1 acknowledged again, at %d acknowledged pushes", since(), load.ackedCount.Load())

	load.drain(45 * time.Second)
	// The outage of one primary is logged once when it starts and once when
	// it ends, although the other primaries answered all along. (A second
	// pair is allowed: the restarted node's return may cost a moment.)
	for _, s := range servers {
		var down, up int
		procWaitCondition(t, 15*time.Second, s.name+" logging the outage's end", func() bool {
			out := s.output.String()
			down, up = strings.Count(out, `msg="redis is unreachable"`), strings.Count(out, `msg="redis is reachable again"`)
			return down >= 1 && up == down
		})
		if down > 2 {
			t.Errorf("%s logged the outage %d times and its end %d times, want once or twice each", s.name, down, up)
		}
	}
}

// TestProcessClusterSlotMigration moves the slots of one primary's
// partitions to another primary while jobs are pushed, popped and
// finished, pausing half-way through the keys so that the servers meet
// ASK and TRYAGAIN answers, then MOVED once the slots have moved. Nothing
// is lost and nothing is delivered twice (the ttr outlasts the run), and
// /metrics shows the redirects were met.
func TestProcessClusterSlotMigration(t *testing.T) {
	const (
		n        = procClusterPartitions
		jobCount = 800
	)
	cluster := redistest.StartCluster(t, 3, 0)
	a := startProcClusterServer(t, "A", cluster.Addrs())
	b := startProcClusterServer(t, "B", cluster.Addrs())
	servers := []*procServer{a, b}
	api := newProcClient()
	defer api.close()

	// A delayed job in every partition, in a topic nobody pops, keeps keys
	// in every slot to move; it must be there after the move.
	markers := procIDsPerPartition("marker", n, 1)
	for i, id := range procFlatten(markers) {
		api.mustPush(t, servers[i%2], procPush{Topic: "marker", ID: id, Delay: 3600, TTR: 30, Body: id})
	}
	procCheckPartitionTags(t, cluster, markers)

	source := cluster.SlotOwner(t, redisconn.Slot(procPartitionTag(1, n)))
	var target string
	for _, p := range cluster.Primaries(t) {
		if p != source {
			target = p
			break
		}
	}
	moving := procPartitionsOn(t, cluster, source, n)

	topics := []string{"move-a", "move-b", "move-c"}
	load := startProcLoad(t, api, procLoadConfig{
		servers:      servers,
		jobs:         procLoadJobs("move", jobCount, topics, 60),
		topics:       topics,
		producers:    4,
		consumers:    12,
		pushInterval: 4 * 5 * time.Millisecond,
		exactlyOnce:  true,
		// While a slot migrates, a call on its keys can be refused
		// (TRYAGAIN) for longer than the engine's retries last.
		retryable: []string{procMsgUnavailable},
	}, 120*time.Second)
	load.waitAcked(jobCount/4, 30*time.Second)

	migrations := make([]*redistest.Migration, len(moving))
	for i, p := range moving {
		migrations[i] = cluster.StartMigration(t, redisconn.Slot(procPartitionTag(p, n)), target)
	}
	// Half-way: half of the slots have half of their keys on the target,
	// so that a call finding some of its keys answers TRYAGAIN; the others
	// have all their keys there, so that a call finds none and is answered
	// ASK (then TRYAGAIN from the target, for a script some of whose keys
	// do not exist).
	movedKeys := 0
	for i, m := range migrations {
		slot := redisconn.Slot(procPartitionTag(moving[i], n))
		keys, err := redis.Int(cluster.Node(source).Do("CLUSTER", "COUNTKEYSINSLOT", slot))
		if err != nil || keys == 0 {
			t.Fatalf("CLUSTER COUNTKEYSINSLOT %d at %s: %d, %v; want the keys of partition %d", slot, source, keys, err, moving[i])
		}
		if i%2 == 0 {
			keys = max(1, keys/2)
		}
		movedKeys += m.MoveKeys(t, keys)
	}
	t.Logf("partitions %v migrating from %s to %s, %d keys moved, %d acknowledged pushes", moving, source, target, movedKeys, load.ackedCount.Load())
	procWaitCondition(t, 20*time.Second, "the servers meeting ASK and TRYAGAIN", func() bool {
		return procRedirects(t, servers, "ask") > 0 && procRedirects(t, servers, "tryagain") > 0
	})
	movedBefore := procRedirects(t, servers, "moved")
	for _, m := range migrations {
		m.Finish(t)
	}
	for _, p := range moving {
		if owner := cluster.SlotOwner(t, redisconn.Slot(procPartitionTag(p, n))); owner != target {
			t.Fatalf("partition %d is served by %s after the move, want %s", p, owner, target)
		}
	}
	finished := time.Now()
	procWaitCondition(t, 20*time.Second, "the servers meeting MOVED", func() bool {
		return procRedirects(t, servers, "moved") > movedBefore
	})
	// Each server reaches the moved partitions at their new primary well
	// before its periodic refresh of the slot map (15 s) could explain it.
	probes := procIDsPerPartition("probe", n, 1)
	var probeIDs []string
	for _, p := range moving {
		id := probes[p-1][0]
		probeIDs = append(probeIDs, id)
		for _, s := range servers {
			procWaitCondition(t, 5*time.Second-time.Since(finished), "a push to moved partition "+strconv.Itoa(p)+" through "+s.name, func() bool {
				env, status, err := api.call(s.baseURL, "/push", procPush{Topic: "move-probe", ID: id, TTR: 30, Body: id}, procCallTimeout)
				return err == nil && status == 200 && env.Code == 0
			})
		}
	}
	if env := api.mustOK(t, a, "/delete", map[string]any{"ids": probeIDs}); string(env.Data) != fmt.Sprintf(`{"deleted":%d}`, len(probeIDs)) {
		t.Fatalf("delete of the probes answered %s", env.Data)
	}
	t.Logf("moved at %d acknowledged pushes; redirects met: moved %v, ask %v, tryagain %v", load.ackedCount.Load(),
		procRedirects(t, servers, "moved"), procRedirects(t, servers, "ask"), procRedirects(t, servers, "tryagain"))

	load.drain(30 * time.Second)
	for i, id := range procFlatten(markers) {
		if job := procClusterGet(t, api, servers[i%2], id); job == nil || job.State != "delay" || job.Body != id {
			t.Errorf("marker %s after the move: %+v, want the delayed job", id, job)
		}
	}
}

// TestProcessClusterWebhooks runs two servers on a cluster with callback
// jobs in every partition, some due at once and some found due by the
// scanners later: every job is called, and no two calls of one job
// overlap, nor does any job get a second call after one that succeeded.
func TestProcessClusterWebhooks(t *testing.T) {
	const n = procClusterPartitions
	var (
		mu       sync.Mutex
		calls    = map[string]int{}
		inFlight = map[string]int{}
		overlaps []string
	)
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		id := strings.TrimPrefix(r.URL.Path, "/hook/")
		mu.Lock()
		calls[id]++
		inFlight[id]++
		if inFlight[id] > 1 {
			overlaps = append(overlaps, id)
		}
		mu.Unlock()
		// The answer takes a while, so that a second call of the same job
		// would overlap this one rather than follow it.
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		inFlight[id]--
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer receiver.Close()

	cluster := redistest.StartCluster(t, 3, 0)
	conf := []string{"callback_allow = 127.0.0.1"}
	servers := []*procServer{
		startProcClusterServer(t, "A", cluster.Addrs(), conf...),
		startProcClusterServer(t, "B", cluster.Addrs(), conf...),
	}
	api := newProcClient()
	defer api.close()

	ids := procFlatten(procIDsPerPartition("hook", n, 6))
	for i, id := range ids {
		job := map[string]any{"topic": "hooks", "id": id, "ttr": 30, "body": id,
			"callback": map[string]any{"url": receiver.URL + "/hook/" + id, "timeout": 5}}
		if i%2 == 1 {
			job["delay"] = 1
		}
		api.mustOK(t, servers[i%2], "/push", job)
	}
	procWaitCondition(t, 30*time.Second, fmt.Sprintf("calls of all %d callback jobs", len(ids)), func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range ids {
			if calls[id] == 0 {
				return false
			}
		}
		return true
	})
	procWaitCondition(t, 15*time.Second, "every callback job finished", func() bool {
		for _, id := range ids {
			if procClusterGet(t, api, servers[0], id) != nil {
				return false
			}
		}
		return true
	})
	// Both servers report every call they made: no call is still to come.
	procWaitCondition(t, 10*time.Second, "the servers counting every call", func() bool {
		total := 0.0
		for _, s := range servers {
			total += max(0, procMetric(t, s, `delayqueue_webhook_calls_total{result="2xx"}`))
		}
		return total >= float64(len(ids))
	})

	mu.Lock()
	defer mu.Unlock()
	if len(overlaps) > 0 {
		t.Errorf("%d calls overlapped another call of the same job, e.g. %v", len(overlaps), procFirstN(overlaps, 10))
	}
	var again []string
	for _, id := range ids {
		if calls[id] != 1 {
			again = append(again, fmt.Sprintf("%s×%d", id, calls[id]))
		}
	}
	if len(again) > 0 {
		t.Errorf("%d jobs called more than once although their first call succeeded: %v", len(again), procFirstN(again, 10))
	}
	var perServer []string
	total := 0.0
	for _, s := range servers {
		v := max(0, procMetric(t, s, `delayqueue_webhook_calls_total{result="2xx"}`))
		total += v
		perServer = append(perServer, fmt.Sprintf("%s %v", s.name, v))
	}
	if total != float64(len(ids)) {
		t.Errorf("the servers counted %v successful calls (%s), want %d", total, strings.Join(perServer, ", "), len(ids))
	}
	t.Logf("%d callback jobs; successful calls per server: %s", len(ids), strings.Join(perServer, ", "))
}
