package routers

import (
	"encoding/json"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

// The real engine satisfies the interface the HTTP layer needs.
var _ Queue = (*delayqueue.Queue)(nil)

// e2eBlockTimeout is the engine's and the handler's longest pop hold.
const e2eBlockTimeout = 5 * time.Second

// e2eBackends are the Redis the end-to-end tests run on. The tests walk
// them one after the other rather than in parallel (redistest.ForEach):
// their fronts share the package's HTTP clients, whose idle connections a
// front's clean-up closes.
func e2eBackends() []redistest.Backend {
	return []redistest.Backend{redistest.MiniBackend(), redistest.ServerBackend(), sharedCluster.Backend()}
}

// startE2EEngine runs the real engine on r until the test ends.
func startE2EEngine(t *testing.T, r *redistest.Redis) *delayqueue.Queue {
	t.Helper()
	return enginetest.StartOn(t, r, e2eBlockTimeout, redistest.Logger(t))
}

// e2eOptions are the handler's options in the end-to-end tests.
func e2eOptions() Options { return Options{BlockTimeout: e2eBlockTimeout} }

// e2eServer serves the engine q through the real handler on the front f,
// stopped when the test ends, before the engine stops.
func e2eServer(t *testing.T, f front, q *delayqueue.Queue) string {
	t.Helper()
	return f.serve(t, q, e2eOptions(), redistest.Logger(t)) // stops before the engine's cleanup
}

// post sends one request and checks the envelope.
func post(t *testing.T, url, path, body string) response {
	t.Helper()
	got, problem := tryPost(url, path, body)
	if problem != "" {
		t.Fatalf("POST %s %s: %s", path, body, problem)
	}
	return got
}

// tryPost sends one request and says what is wrong with the answer's
// envelope, if anything; it may run outside the test's goroutine.
func tryPost(url, path, body string) (response, string) {
	resp, err := clientFor(path, len(body)).Post(url+path, "application/json", strings.NewReader(body))
	if err != nil {
		return response{}, err.Error()
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return response{}, "read the answer: " + err.Error()
	}
	return parseEnvelope(resp.StatusCode, resp.Header, raw)
}

// mustSucceed sends a request that must get code 0.
func mustSucceed(t *testing.T, url, path, body string) response {
	t.Helper()
	got := post(t, url, path, body)
	if got.status != 200 || got.code != 0 {
		t.Fatalf("POST %s %s: %d %s", path, body, got.status, got.raw)
	}
	return got
}

// orZero is a time an answer may leave out, 0 when it does.
func orZero(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// decodeExactly decodes data into v, a type of package wire, failing on
// fields v does not have and on missing fields, except those tagged
// omitempty (which the server leaves out in some states).
func decodeExactly(t *testing.T, data json.RawMessage, v any) {
	t.Helper()
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		t.Fatalf("data %s: %v", data, err)
	}
	fields := reflect.TypeOf(v).Elem()
	var want, got []string
	for i := range fields.NumField() {
		name, options, _ := strings.Cut(fields.Field(i).Tag.Get("json"), ",")
		if _, given := members[name]; options == "omitempty" && !given {
			continue
		}
		want = append(want, name)
	}
	for name := range members {
		got = append(got, name)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("data fields %v, want %v: %s", got, want, data)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatalf("data %s: %v", data, err)
	}
}

func popJob(t *testing.T, url, body string) *wire.Delivery {
	t.Helper()
	got := mustSucceed(t, url, "/pop", body)
	if string(got.data) == "null" {
		return nil
	}
	var d wire.Delivery
	decodeExactly(t, got.data, &d)
	return &d
}

func getJob(t *testing.T, url, id string) *wire.JobInfo {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"id": id})
	got := mustSucceed(t, url, "/get", string(body))
	if string(got.data) == "null" {
		return nil
	}
	var j wire.JobInfo
	decodeExactly(t, got.data, &j)
	return &j
}

func TestEndToEnd(t *testing.T) {
	for _, backend := range e2eBackends() {
		t.Run(backend.Name, func(t *testing.T) {
			forEachFront(t, func(t *testing.T, f front) {
				r := backend.Start(t)
				q := startE2EEngine(t, r)
				url := e2eServer(t, f, q)

				// push, get, pop, get (reserved), finish, get (gone).
				const body = " hello, 世界 \n\u0000 "
				pushBody, _ := json.Marshal(map[string]any{"topic": " mail ", "id": "a1", "delay": 0, "ttr": 30, "body": body})
				before := time.Now()
				got := mustSucceed(t, url, "/push", string(pushBody))
				if got.msg != "pushed" {
					t.Fatalf("push answered %s", got.raw)
				}
				f.checkVia(t, got, "/push", len(pushBody), e2eOptions())
				job := getJob(t, url, "a1")
				if job == nil || job.Topic != "mail" || job.ID != "a1" || job.TTR != 30 || job.Body != body ||
					(job.State != delayqueue.StateDelay && job.State != delayqueue.StateReady) || job.Attempts != 0 {
					t.Fatalf("get after push: %+v", job)
				}
				if due := time.UnixMilli(job.DelayMS); due.Before(before.Add(-2*time.Second)) || due.After(time.Now().Add(2*time.Second)) ||
					job.Delay != job.DelayMS/1000 {
					t.Fatalf("get after push: due %v (delay %d, delay_ms %d), pushed at %v", due, job.Delay, job.DelayMS, before)
				}
				if created := time.Unix(job.CreatedAt, 0); created.Before(before.Add(-2*time.Second)) || created.After(time.Now().Add(2*time.Second)) {
					t.Fatalf("created_at %v, pushed at %v", created, before)
				}

				d := popJob(t, url, `{"topic":"other, mail","timeout":5}`)
				if want := (&wire.Delivery{ID: "a1", Body: body, Topic: "mail", TTR: 30, Attempts: 1}); !reflect.DeepEqual(d, want) {
					t.Fatalf("pop: %+v, want %+v", d, want)
				}
				if job := getJob(t, url, "a1"); job == nil || job.State != delayqueue.StateReserved || job.Attempts != 1 {
					t.Fatalf("get after pop: %+v", job)
				}
				got = mustSucceed(t, url, "/finish", `{"id":"a1"}`)
				if got.msg != "finished" {
					t.Fatalf("finish answered %s", got.raw)
				}
				f.checkVia(t, got, "/finish", len(`{"id":"a1"}`), e2eOptions())
				if job := getJob(t, url, "a1"); job != nil {
					t.Fatalf("get after finish: %+v", job)
				}
				if d := popJob(t, url, `{"topic":"mail","timeout":0}`); d != nil {
					t.Fatalf("pop of an empty topic: %+v", d)
				}

				// delay_ms: never early.
				start := time.Now()
				mustSucceed(t, url, "/push", `{"topic":"mail","id":"ms","delay_ms":300,"ttr":30,"body":"x"}`)
				d = popJob(t, url, `{"topic":"mail","timeout":5}`)
				if d == nil || d.ID != "ms" {
					t.Fatalf("pop of a delay_ms job: %+v", d)
				}
				if elapsed := time.Since(start); elapsed < 300*time.Millisecond {
					t.Fatalf("a job pushed with delay_ms 300 was delivered after %v", elapsed)
				}
				mustSucceed(t, url, "/finish", `{"id":"ms"}`)

				// ttr: an unfinished job is delivered again, not before its ttr.
				mustSucceed(t, url, "/push", `{"topic":"retry","id":"r1","ttr":1,"body":"again"}`)
				beforeFirst := time.Now() // the lease starts at the claim, after this
				first := popJob(t, url, `{"topic":"retry","timeout":5}`)
				second := popJob(t, url, `{"topic":"retry","timeout":5}`)
				if first == nil || second == nil || second.ID != "r1" || second.Attempts != 2 {
					t.Fatalf("ttr redelivery: first %+v, second %+v", first, second)
				}
				if elapsed := time.Since(beforeFirst); elapsed < time.Second-5*time.Millisecond {
					t.Fatalf("redelivered %v after the first pop began, ttr is 1s", elapsed)
				}
				mustSucceed(t, url, "/finish", `{"id":"r1"}`)

				// A delayed job: get shows the due time; delete removes it.
				before = time.Now()
				mustSucceed(t, url, "/push", `{"topic":"mail","id":"later","delay":100,"ttr":5,"body":"b"}`)
				job = getJob(t, url, "later")
				if job == nil || job.State != delayqueue.StateDelay ||
					job.Delay < before.Unix()+99 || job.Delay > time.Now().Unix()+101 {
					t.Fatalf("get of a delayed job: %+v (pushed at %d)", job, before.Unix())
				}
				if got := mustSucceed(t, url, "/delete", `{"id":"later"}`); got.msg != "deleted" {
					t.Fatalf("delete answered %s", got.raw)
				}
				if job := getJob(t, url, "later"); job != nil {
					t.Fatalf("get after delete: %+v", job)
				}
				// Unknown ids are code 0, as in the original.
				mustSucceed(t, url, "/delete", `{"id":"later"}`)
				mustSucceed(t, url, "/finish", `{"id":"never-pushed"}`)

				// Re-push replaces: the new body is delivered, once, counted afresh.
				mustSucceed(t, url, "/push", `{"topic":"mail","id":"re","delay":100,"ttr":30,"body":"old"}`)
				if got := mustSucceed(t, url, "/push", `{"topic":"mail","id":"re","delay":0,"ttr":30,"body":"new"}`); got.msg != "pushed, replacing the job with the same id" {
					t.Fatalf("re-push answered %s", got.raw)
				}
				d = popJob(t, url, `{"topic":"mail","timeout":5}`)
				if want := (&wire.Delivery{ID: "re", Body: "new", Topic: "mail", TTR: 30, Attempts: 1}); !reflect.DeepEqual(d, want) {
					t.Fatalf("pop after re-push: %+v, want %+v", d, want)
				}
				mustSucceed(t, url, "/finish", `{"id":"re"}`)
				if d := popJob(t, url, `{"topic":"mail","timeout":0}`); d != nil {
					t.Fatalf("a stale copy was delivered after re-push: %+v", d)
				}

				// Invalid input never reaches the engine.
				if got := post(t, url, "/push", `{"topic":"a,b","id":"x","ttr":5}`); got.status != 200 || got.code != 1 {
					t.Fatalf("invalid push answered %d %s", got.status, got.raw)
				}

				// The shared cluster cannot be stopped: TestEndToEndClusterGone
				// stops a cluster of its own.
				if r.Stop != nil {
					r.Stop()
					checkRedisGone(t, url)
				}
			})
		})
	}
}

// A cluster whose every node is gone is answered as one Redis gone. Both
// fronts serve the one engine: a cluster is slow to start.
func TestEndToEndClusterGone(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	q := enginetest.StartOnCluster(t, c.Addrs(), "", e2eBlockTimeout, redistest.Logger(t))
	urls := make(map[front]string)
	for _, f := range fronts() {
		urls[f] = e2eServer(t, f, q)
		mustSucceed(t, urls[f], "/push", `{"topic":"mail","id":"before","ttr":5}`)
	}
	for _, n := range c.Nodes {
		n.Kill()
	}
	forEachFront(t, func(t *testing.T, f front) { checkRedisGone(t, urls[f]) })
}

// checkRedisGone checks the answers once Redis is gone: code 1 with a
// clear message, not a hang or a 5xx. The requests go at once: on a
// cluster each waits for the routing to give up.
func checkRedisGone(t *testing.T, url string) {
	t.Helper()
	requests := [][2]string{
		{"/push", `{"topic":"mail","id":"down","ttr":5}`}, {"/get", `{"id":"x"}`},
		{"/finish", `{"id":"x"}`}, {"/delete", `{"id":"x"}`},
		{"/release", `{"id":"x"}`}, {"/touch", `{"id":"x","attempt":1}`},
		{"/dead/list", `{"topic":"mail"}`}, {"/dead/kick", `{"topic":"mail","count":1}`},
		{"/dead/delete", `{"topic":"mail","all":true}`}, {"/stats", `{}`}, {"/topics", `{}`},
		{"/push", `{"jobs":[{"topic":"mail","id":"down","ttr":5}]}`}, {"/finish", `{"ids":["x"]}`}, {"/delete", `{"ids":["x"]}`},
		// A held pop keeps waiting out its hold rather than failing at
		// once, so that consumers do not spin.
		{"/pop", `{"topic":"mail","timeout":1}`},
	}
	type answer struct {
		got     response
		problem string
		took    time.Duration
	}
	answers := make([]answer, len(requests))
	var wg sync.WaitGroup
	for i, req := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			answers[i].got, answers[i].problem = tryPost(url, req[0], req[1])
			answers[i].took = time.Since(start)
		}()
	}
	wg.Wait()
	for i, req := range requests {
		a := answers[i]
		switch {
		case a.problem != "":
			t.Errorf("%s %s with Redis stopped: %s", req[0], req[1], a.problem)
		case req[0] == "/pop":
			if a.took < 900*time.Millisecond || a.got.status != 200 {
				t.Errorf("pop with Redis stopped answered after %v: %d %s", a.took, a.got.status, a.got.raw)
			}
		case a.got.status != 200 || a.got.code != 1 || a.got.msg != msgRedisUnavailable:
			t.Errorf("%s %s with Redis stopped: %d %s", req[0], req[1], a.got.status, a.got.raw)
		}
	}
}

// mustFail sends a request that must get code 1 with message want.
func mustFail(t *testing.T, url, path, body, want string) response {
	t.Helper()
	got := post(t, url, path, body)
	if got.status != 200 || got.code != 1 || got.msg != want {
		t.Fatalf("POST %s %s: %d %s\nwant code 1 %q", path, body, got.status, got.raw, want)
	}
	return got
}

// decodeData decodes a success's data into v (any JSON shape).
func decodeData(t *testing.T, got response, v any) {
	t.Helper()
	if err := json.Unmarshal(got.data, v); err != nil {
		t.Fatalf("data of %s: %v", got.raw, err)
	}
}

// popUntil pops from topic until a job arrives or the deadline passes;
// each pop holds up to a second, so the loop does not spin.
func popUntil(t *testing.T, url, topic string, deadline time.Duration) *wire.Delivery {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"topic": topic, "timeout": 1})
	for end := time.Now().Add(deadline); time.Now().Before(end); {
		if d := popJob(t, url, string(body)); d != nil {
			return d
		}
	}
	t.Fatalf("no job of %s within %v", topic, deadline)
	return nil
}

func TestEndToEndLifecycle(t *testing.T) {
	for _, backend := range e2eBackends() {
		t.Run(backend.Name, func(t *testing.T) {
			forEachFront(t, func(t *testing.T, f front) {
				q := startE2EEngine(t, backend.Start(t))
				url := e2eServer(t, f, q)
				f.checkVia(t, mustSucceed(t, url, "/get", `{"id":"none"}`), "/get", len(`{"id":"none"}`), e2eOptions())
				t.Run("retry, release, dead letters, kick", func(t *testing.T) { e2eRetryToDead(t, url) })
				t.Run("batches, stats, topics", func(t *testing.T) { e2eBatches(t, url) })
				t.Run("touch and refusals", func(t *testing.T) { e2eTouchAndRefusals(t, url) })
				t.Run("finish with a receipt", func(t *testing.T) { e2eFinishWithReceipt(t, url) })
			})
		})
	}
}

// A job with retry [1] and max_attempts 2 (and a ttr long enough never to
// run out here): released twice, it ends in the
// dead letters; kicked, it is delivered afresh.
func e2eRetryToDead(t *testing.T, url string) {
	before := time.Now()
	mustSucceed(t, url, "/push", `{"topic":"life","id":"L1","ttr":10,"retry":[1],"max_attempts":2,"body":"work"}`)
	if job := getJob(t, url, "L1"); job == nil || job.State != delayqueue.StateReady || !slices.Equal(job.Retry, []int{1}) ||
		job.MaxAttempts != 2 || job.AttemptsLimit != 2 || job.CreatedAtMS < before.UnixMilli()-2000 || job.CreatedAt != job.CreatedAtMS/1000 {
		t.Fatalf("get after push: %+v", job)
	}

	d := popUntil(t, url, "life", 5*time.Second)
	if d.ID != "L1" || d.Attempts != 1 {
		t.Fatalf("first delivery %+v", d)
	}
	if job := getJob(t, url, "L1"); job == nil || job.State != delayqueue.StateReserved || job.Attempts != 1 ||
		orZero(job.LeaseUntilMS) == 0 || orZero(job.LeaseUntil) != orZero(job.LeaseUntilMS)/1000 {
		t.Fatalf("get while reserved: %+v", job)
	}

	releasedAt := time.Now()
	got := mustSucceed(t, url, "/release", `{"id":"L1","attempt":1}`)
	var released wire.ReleaseResult
	decodeExactly(t, got.data, &released)
	// The schedule's wait: one second after the release.
	if released.State != delayqueue.StateDelay || released.Due != released.DueMS/1000 ||
		released.DueMS < releasedAt.Add(900*time.Millisecond).UnixMilli() || released.DueMS > time.Now().Add(1100*time.Millisecond).UnixMilli() {
		t.Fatalf("release 1: %s (released at %d ms)", got.raw, releasedAt.UnixMilli())
	}
	if job := getJob(t, url, "L1"); job == nil || job.State != delayqueue.StateDelay || job.Attempts != 1 || job.LeaseUntilMS != nil {
		t.Fatalf("get after release: %+v", job)
	}

	d = popUntil(t, url, "life", 5*time.Second)
	if d.ID != "L1" || d.Attempts != 2 {
		t.Fatalf("second delivery %+v", d)
	}
	if early := time.UnixMilli(released.DueMS).Sub(time.Now()); early > 0 {
		t.Fatalf("second delivery %v before its due time", early)
	}

	got = mustSucceed(t, url, "/release", `{"id":"L1","attempt":2}`)
	decodeExactly(t, got.data, &released)
	if released.State != delayqueue.StateDead {
		t.Fatalf("release 2 with max_attempts 2: %s", got.raw)
	}
	job := getJob(t, url, "L1")
	if job == nil || job.State != delayqueue.StateDead || job.Attempts != 2 || job.DeadReason != delayqueue.ReasonReleased ||
		orZero(job.DeadAtMS) == 0 || orZero(job.DeadAt) != orZero(job.DeadAtMS)/1000 || job.LeaseUntilMS != nil {
		t.Fatalf("get of the dead job: %+v", job)
	}

	got = mustSucceed(t, url, "/dead/list", `{"topic":"life"}`)
	var list wire.DeadPage
	decodeData(t, got, &list)
	if list.Total != 1 || len(list.Jobs) != 1 {
		t.Fatalf("dead list: %s", got.raw)
	}
	// The dead letter as the server wrote it, not as list re-encodes it.
	var page map[string]json.RawMessage
	var rawJobs []json.RawMessage
	decodeData(t, got, &page)
	if err := json.Unmarshal(page["jobs"], &rawJobs); err != nil || len(rawJobs) != 1 {
		t.Fatalf("dead list: %s (%v)", got.raw, err)
	}
	var dead wire.DeadJob
	decodeExactly(t, rawJobs[0], &dead)
	if want := (wire.DeadJob{ID: "L1", Topic: "life", Body: "work", Attempts: 2, Reason: delayqueue.ReasonReleased,
		DeadAt: orZero(job.DeadAt), DeadAtMS: orZero(job.DeadAtMS), CreatedAt: job.CreatedAt, CreatedAtMS: job.CreatedAtMS}); dead != want {
		t.Fatalf("dead letter %+v, want %+v", dead, want)
	}

	mustFail(t, url, "/finish", `{"id":"L1"}`, "job is dead-lettered")
	// An unknown id is not counted as finished: nothing was.
	got = mustFail(t, url, "/finish", `{"ids":["L1","unknown"]}`, "1 job is dead-lettered")
	if string(got.data) != `{"finished":0,"dead":["L1"]}` {
		t.Fatalf("batch finish with a dead job: %s", got.raw)
	}
	mustFail(t, url, "/release", `{"id":"L1"}`, "job is dead-lettered")
	mustFail(t, url, "/touch", `{"id":"L1"}`, "job is dead-lettered")
	if d := popJob(t, url, `{"topic":"life","timeout":0}`); d != nil {
		t.Fatalf("a dead job was delivered: %+v", d)
	}
	checkStats(t, url, "life", wire.TopicStats{Dead: 1})

	got = mustSucceed(t, url, "/dead/kick", `{"topic":"life","id":"L1"}`)
	if string(got.data) != `{"kicked":["L1"]}` {
		t.Fatalf("kick: %s", got.raw)
	}
	d = popUntil(t, url, "life", 5*time.Second)
	if d.ID != "L1" || d.Attempts != 1 || d.Body != "work" {
		t.Fatalf("delivery after kick %+v", d)
	}
	mustSucceed(t, url, "/finish", `{"id":"L1"}`)
	if job := getJob(t, url, "L1"); job != nil {
		t.Fatalf("get after finish: %+v", job)
	}
	if got := mustSucceed(t, url, "/dead/list", `{"topic":"life"}`); string(got.data) != `{"total":0,"jobs":[]}` {
		t.Fatalf("dead list after kick and finish: %s", got.raw)
	}

	// A job with one attempt dies at its first release; /dead/delete
	// removes it.
	mustSucceed(t, url, "/push", `{"topic":"life","id":"L2","ttr":30,"max_attempts":1}`)
	if d := popUntil(t, url, "life", 5*time.Second); d.ID != "L2" {
		t.Fatalf("delivery %+v", d)
	}
	got = mustSucceed(t, url, "/release", `{"id":"L2","delay":0}`)
	decodeExactly(t, got.data, &released)
	if released.State != delayqueue.StateDead {
		t.Fatalf("release of a job with one attempt: %s", got.raw)
	}
	if got := mustSucceed(t, url, "/dead/delete", `{"topic":"life","all":true}`); string(got.data) != `{"deleted":1}` {
		t.Fatalf("dead delete: %s", got.raw)
	}
	if job := getJob(t, url, "L2"); job != nil {
		t.Fatalf("get after dead delete: %+v", job)
	}
	checkStats(t, url, "life", wire.TopicStats{})
}

// A batch of 3, popped with count and finished by ids; if_absent; /stats
// and /topics agree with what is stored.
func e2eBatches(t *testing.T, url string) {
	got := mustSucceed(t, url, "/push", `{"jobs":[
		{"topic":"batch","id":"B1","ttr":30,"body":"1"},
		{"topic":"batch","id":"B2","ttr":30,"body":"2"},
		{"topic":"batch","id":"B3","ttr":30,"body":"3"}]}`)
	if string(got.data) != `[{"id":"B1","status":"created"},{"id":"B2","status":"created"},{"id":"B3","status":"created"}]` {
		t.Fatalf("batch push: %s", got.raw)
	}
	// Pushed again with if_absent, and a new one: nothing is reset.
	got = mustSucceed(t, url, "/push", `{"jobs":[
		{"topic":"batch","id":"B1","ttr":30,"body":"changed","if_absent":true},
		{"topic":"later","id":"B4","delay":3600,"ttr":30,"if_absent":true}]}`)
	if string(got.data) != `[{"id":"B1","status":"exists"},{"id":"B4","status":"created"}]` {
		t.Fatalf("batch push with if_absent: %s", got.raw)
	}
	if got := mustSucceed(t, url, "/push", `{"topic":"later","id":"B4","ttr":30,"if_absent":true}`); string(got.data) != `{"exists":true}` {
		t.Fatalf("single push with if_absent: %s", got.raw)
	}
	mustFail(t, url, "/push", `{"jobs":[{"topic":"batch","id":"B5","ttr":30},{"topic":"batch","id":"B5","ttr":30}]}`, "1 of 2 jobs is invalid")
	if job := getJob(t, url, "B5"); job != nil {
		t.Fatalf("a job of an invalid batch was stored: %+v", job)
	}

	checkStats(t, url, "batch", wire.TopicStats{Ready: 3})
	checkStats(t, url, "later", wire.TopicStats{Delay: 1})
	checkTopicsMatchStats(t, url)

	var deliveries []wire.Delivery
	for end := time.Now().Add(5 * time.Second); len(deliveries) < 3 && time.Now().Before(end); {
		got := mustSucceed(t, url, "/pop", `{"topic":"batch","count":10,"timeout":1}`)
		var batch []wire.Delivery
		decodeData(t, got, &batch)
		if batch == nil {
			t.Fatalf("pop with count answered %s, want an array", got.raw)
		}
		deliveries = append(deliveries, batch...)
	}
	var ids []string
	for _, d := range deliveries {
		if d.Topic != "batch" || d.Attempts != 1 || d.Body != strings.TrimPrefix(d.ID, "B") {
			t.Fatalf("batch delivery %+v", d)
		}
		ids = append(ids, d.ID)
	}
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"B1", "B2", "B3"}) {
		t.Fatalf("popped %v, want B1 B2 B3", ids)
	}
	if got := mustSucceed(t, url, "/pop", `{"topic":"batch","count":10,"timeout":0}`); string(got.data) != `[]` {
		t.Fatalf("pop with count of an empty topic: %s", got.raw)
	}
	checkStats(t, url, "batch", wire.TopicStats{Reserved: 3})
	checkTopicsMatchStats(t, url)

	got = mustSucceed(t, url, "/finish", `{"ids":["B1","B2","B3"]}`)
	if string(got.data) != `{"finished":3,"dead":[]}` {
		t.Fatalf("finish ids: %s", got.raw)
	}
	if got := mustSucceed(t, url, "/delete", `{"ids":["B4","B1"]}`); string(got.data) != `{"deleted":1}` {
		t.Fatalf("delete ids: %s", got.raw)
	}
	checkStats(t, url, "batch", wire.TopicStats{})
	checkTopicsMatchStats(t, url)
}

// /touch extends a lease, refuses a stale attempt; release and touch refuse
// jobs nobody holds.
func e2eTouchAndRefusals(t *testing.T, url string) {
	mustSucceed(t, url, "/push", `{"topic":"touch","id":"T1","ttr":30}`)
	d := popUntil(t, url, "touch", 5*time.Second)
	if d.ID != "T1" || d.Attempts != 1 {
		t.Fatalf("delivery %+v", d)
	}
	leaseBefore := orZero(getJob(t, url, "T1").LeaseUntilMS)

	mustFail(t, url, "/touch", `{"id":"T1","attempt":2}`, "stale delivery: attempt 2 is not the job's current delivery")
	mustFail(t, url, "/release", `{"id":"T1","attempt":7}`, "stale delivery: attempt 7 is not the job's current delivery")
	if job := getJob(t, url, "T1"); job.State != delayqueue.StateReserved || orZero(job.LeaseUntilMS) != leaseBefore {
		t.Fatalf("a stale touch or release changed the job: %+v", job)
	}

	touchedAt := time.Now()
	got := mustSucceed(t, url, "/touch", `{"id":"T1","attempt":1}`)
	var touched wire.TouchResult
	decodeExactly(t, got.data, &touched)
	if touched.LeaseUntil != touched.LeaseUntilMS/1000 || touched.LeaseUntilMS < touchedAt.Add(29*time.Second).UnixMilli() ||
		touched.LeaseUntilMS > time.Now().Add(31*time.Second).UnixMilli() {
		t.Fatalf("touch: %s, touched at %d ms", got.raw, touchedAt.UnixMilli())
	}
	if job := getJob(t, url, "T1"); orZero(job.LeaseUntilMS) != touched.LeaseUntilMS {
		t.Fatalf("get after touch: lease %d, touch said %d", orZero(job.LeaseUntilMS), touched.LeaseUntilMS)
	}
	mustSucceed(t, url, "/touch", `{"id":"T1"}`) // without attempt: not checked
	mustSucceed(t, url, "/finish", `{"id":"T1"}`)

	mustSucceed(t, url, "/push", `{"topic":"touch","id":"T2","delay":100,"ttr":30}`)
	mustFail(t, url, "/release", `{"id":"T2"}`, "job is not reserved (it is delay)")
	mustFail(t, url, "/touch", `{"id":"T2"}`, "job is not reserved (it is delay)")
	mustSucceed(t, url, "/delete", `{"id":"T2"}`)
	mustFail(t, url, "/release", `{"id":"T2"}`, "job not found")
	mustFail(t, url, "/touch", `{"id":"T2","attempt":1}`, "job not found")
}

// checkStats compares /stats of one topic with want.
func checkStats(t *testing.T, url, topic string, want wire.TopicStats) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"topic": topic})
	got := mustSucceed(t, url, "/stats", string(body))
	var stats map[string]wire.TopicStats
	decodeData(t, got, &stats)
	if len(stats) != 1 || stats[topic] != want {
		t.Fatalf("stats of %s: %s, want %+v", topic, got.raw, want)
	}
}

// checkTopicsMatchStats checks that /topics lists, sorted, exactly the
// topics /stats reports, and that each has a job.
func checkTopicsMatchStats(t *testing.T, url string) {
	t.Helper()
	var topics []string
	decodeData(t, mustSucceed(t, url, "/topics", ``), &topics)
	var stats map[string]wire.TopicStats
	decodeData(t, mustSucceed(t, url, "/stats", `{}`), &stats)
	if topics == nil || !slices.IsSorted(topics) || len(topics) != len(stats) {
		t.Fatalf("topics %v, stats %+v", topics, stats)
	}
	for _, topic := range topics {
		if s, ok := stats[topic]; !ok || s == (wire.TopicStats{}) {
			t.Fatalf("topic %s listed, stats %+v", topic, stats)
		}
	}
}
