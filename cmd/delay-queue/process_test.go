package main

// Process-level black-box tests: the built server binary, started as a child
// process against a real redis-server, driven only through its HTTP API,
// signals and its Redis data. The harness is in processharness_test.go.

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptrace"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
	"github.com/gomodule/redigo/redis"
)

// procFailures collects failures seen by worker goroutines, which may not call
// t.Fatal; the test reports them once the workers are done.
type procFailures struct {
	mu    sync.Mutex
	count int
	first []string
}

func (f *procFailures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.count++
	if len(f.first) < 10 {
		f.first = append(f.first, fmt.Sprintf(format, args...))
	}
}

func (f *procFailures) total() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.count
}

func (f *procFailures) report(t *testing.T, what string) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.count > 0 {
		t.Errorf("%d %s; first ones:\n%s", f.count, what, strings.Join(f.first, "\n"))
	}
}

// procDeliveries records every job handed out by /pop and every finish that
// was acknowledged, across all consumers.
type procDeliveries struct {
	mu         sync.Mutex
	deliveries map[string]int
	finished   map[string]bool
	total      int
	// allSeen is closed once target distinct ids have been delivered.
	target  int
	allSeen chan struct{}
}

func newProcDeliveries(target int) *procDeliveries {
	return &procDeliveries{
		deliveries: make(map[string]int),
		finished:   make(map[string]bool),
		target:     target,
		allSeen:    make(chan struct{}),
	}
}

// delivered records one delivery of id and returns how many it has had.
func (d *procDeliveries) delivered(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.total++
	d.deliveries[id]++
	if d.deliveries[id] == 1 && len(d.deliveries) == d.target {
		close(d.allSeen)
	}
	return d.deliveries[id]
}

func (d *procDeliveries) markFinished(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.finished[id] = true
}

// snapshot copies the counts for the final checks.
func (d *procDeliveries) snapshot() (deliveries map[string]int, finished map[string]bool, total int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	deliveries = make(map[string]int, len(d.deliveries))
	for id, n := range d.deliveries {
		deliveries[id] = n
	}
	finished = make(map[string]bool, len(d.finished))
	for id := range d.finished {
		finished[id] = true
	}
	return deliveries, finished, d.total
}

func procInt64(v int64) *int64 { return &v }

// procFirstN sorts ids and keeps n of them, for readable failure messages.
func procFirstN(ids []string, n int) []string {
	sort.Strings(ids)
	if len(ids) > n {
		return ids[:n]
	}
	return ids
}

// TestProcessBasicFlow drives one job through push, get, pop and finish,
// and checks that delay_ms jobs are never handed out before they are due.
func TestProcessBasicFlow(t *testing.T) {
	rs := redistest.Start(t)
	srv := startProcServer(t, "basic", rs.Addr)
	api := newProcClient()
	defer api.close()
	clock := procRedisConn(t, rs.Addr, 1)

	// The body keeps its spaces and newline: the server stores it byte for byte.
	const body = "  héllo, wörld \n"
	before := procRedisNow(t, clock)
	api.mustPush(t, srv, procPush{Topic: "basic", ID: "job-1", Delay: 0, TTR: 30, Body: body})
	after := procRedisNow(t, clock)

	stored := api.mustGet(t, srv, "job-1")
	if stored == nil {
		t.Fatal("/get job-1 after push: data null")
	}
	if stored.ID != "job-1" || stored.Topic != "basic" || stored.TTR != 30 || stored.Body != body {
		t.Errorf("/get job-1 = %+v, want id job-1, topic basic, ttr 30, body %q", *stored, body)
	}
	if stored.Delay < before.Unix() || stored.Delay > after.Unix()+1 {
		t.Errorf("/get job-1 delay = %d, want the due time in unix seconds, between %d and %d", stored.Delay, before.Unix(), after.Unix()+1)
	}

	popped := api.mustPop(t, srv, "basic", 5)
	if popped == nil {
		t.Fatal("/pop basic with a ready job: data null")
	}
	want := procPopped{ID: "job-1", Body: body, Topic: "basic", TTR: 30, Attempts: 1}
	if *popped != want {
		t.Errorf("/pop basic = %+v, want %+v", *popped, want)
	}
	api.mustOK(t, srv, "/finish", wire.IDRequest{ID: "job-1"})
	if stored := api.mustGet(t, srv, "job-1"); stored != nil {
		t.Errorf("/get job-1 after finish = %+v, want data null", *stored)
	}
	if again := api.mustPop(t, srv, "basic", 0); again != nil {
		t.Errorf("/pop basic after finish = %+v, want data null", *again)
	}

	// delay_ms: the pop is held from right after the push, so it answers as
	// soon as the job is ready. Redis TIME read before the push is a lower
	// bound of the engine's due time minus the delay, and read after the pop
	// an upper bound of the delivery time: if even that is below
	// sent+delay, the job was handed out early.
	for _, delayMS := range []int64{300, 1300} {
		id := "precise-" + strconv.FormatInt(delayMS, 10)
		delay := time.Duration(delayMS) * time.Millisecond
		sent := procRedisNow(t, clock)
		api.mustPush(t, srv, procPush{Topic: "precise", ID: id, Delay: 0, DelayMS: procInt64(delayMS), TTR: 30, Body: id})
		job := api.mustPop(t, srv, "precise", 5)
		poppedAt := procRedisNow(t, clock)
		if job == nil {
			t.Fatalf("/pop precise: data null 5 s after pushing %s with delay_ms %d", id, delayMS)
		}
		if job.ID != id {
			t.Fatalf("/pop precise = %+v, want %s", *job, id)
		}
		elapsed := poppedAt.Sub(sent)
		if elapsed < delay {
			t.Errorf("%s (delay_ms %d) delivered %v after the push began: early", id, delayMS, elapsed)
		}
		// Beyond 500 ms late the scanner was not woken at the due time and
		// only the 1 s safety-net scan found the job.
		if late := elapsed - delay; late > 500*time.Millisecond {
			t.Errorf("%s (delay_ms %d) delivered %v late (upper bound), want within 500 ms", id, delayMS, late)
		} else {
			t.Logf("%s: delivered at most %v after its due time", id, late.Round(time.Millisecond))
		}
		api.mustOK(t, srv, "/finish", wire.IDRequest{ID: id})
	}
}

// TestProcessTwoInstancesDeliverOnce runs two servers on one Redis db and
// checks that every job is delivered exactly once while consumers pop
// through both: the ttr outlasts the run, so any second delivery is a
// duplicate.
func TestProcessTwoInstancesDeliverOnce(t *testing.T) {
	const (
		jobCount      = 2000
		producerCount = 8
		consumerCount = 16
	)
	topics := []string{"twin-a", "twin-b", "twin-c", "twin-d"}
	rs := redistest.Start(t)
	servers := []*procServer{startProcServer(t, "A", rs.Addr), startProcServer(t, "B", rs.Addr)}
	api := newProcClient()
	defer api.close()

	jobs := make(map[string]procPush, jobCount)
	order := make([]string, jobCount)
	for i := range jobCount {
		job := procPush{
			Topic: topics[i%len(topics)],
			ID:    "twin-" + strconv.Itoa(i),
			Delay: int64(i % 3), // 0, 1 or 2 s
			TTR:   30,
			Body:  "twin body " + strconv.Itoa(i),
		}
		if i%7 == 0 {
			job.DelayMS = procInt64(int64(i % 2000))
		}
		jobs[job.ID] = job
		order[i] = job.ID
	}

	var failures procFailures
	deliveries := newProcDeliveries(jobCount)
	ctx, stopConsumers := context.WithCancel(context.Background())
	defer stopConsumers()

	var consumers sync.WaitGroup
	for c := range consumerCount {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			srv := servers[c%2]
			// Each consumer lists the topics in its own order, so that the
			// "first listed topic wins" rule spreads the load.
			rotated := append(append([]string{}, topics[c%len(topics):]...), topics[:c%len(topics)]...)
			topicList := strings.Join(rotated, ",")
			for ctx.Err() == nil && failures.total() < 50 {
				job, _, err := api.pop(srv, topicList, 1)
				if err != nil {
					failures.add("consumer %d: %v", c, err)
					continue
				}
				if job == nil {
					continue
				}
				n := deliveries.delivered(job.ID)
				want, known := jobs[job.ID]
				switch {
				case !known:
					failures.add("consumer %d: delivered unknown id %q", c, job.ID)
				case job.Body != want.Body || job.Topic != want.Topic || job.TTR != want.TTR:
					failures.add("consumer %d: delivered %+v, pushed %+v", c, *job, want)
				case n > 1 || job.Attempts != 1:
					failures.add("consumer %d via %s: %s delivered again (delivery %d, attempts %d) within its ttr", c, srv.name, job.ID, n, job.Attempts)
				}
				if err := api.ok(srv, "/finish", wire.IDRequest{ID: job.ID}); err != nil {
					failures.add("consumer %d: finish %s: %v", c, job.ID, err)
				}
			}
		}()
	}

	var producers sync.WaitGroup
	for p := range producerCount {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for i := p; i < jobCount; i += producerCount {
				if err := api.ok(servers[i%2], "/push", jobs[order[i]]); err != nil {
					failures.add("push %s: %v", order[i], err)
				}
			}
		}()
	}
	producers.Wait()
	t.Logf("pushed %d jobs through 2 servers", jobCount)

	select {
	case <-deliveries.allSeen:
	case <-time.After(45 * time.Second):
		t.Errorf("not every job was delivered within 45 s of the last push")
	}
	stopConsumers()
	consumers.Wait()

	// Everything has been finished: a held pop on each server must come back
	// empty, or a stale entry is still being handed out.
	for _, srv := range servers {
		if job := api.mustPop(t, srv, strings.Join(topics, ","), 2); job != nil {
			t.Errorf("%s: /pop after every job was finished = %+v, want data null (duplicate)", srv.name, *job)
		}
	}

	failures.report(t, "consumer or producer failures")
	counts, _, total := deliveries.snapshot()
	var missing, duplicated []string
	for _, id := range order {
		switch n := counts[id]; {
		case n == 0:
			missing = append(missing, id)
		case n > 1:
			duplicated = append(duplicated, fmt.Sprintf("%s×%d", id, n))
		}
	}
	t.Logf("deliveries: %d for %d jobs", total, jobCount)
	if len(missing) > 0 {
		t.Errorf("%d of %d jobs never delivered, e.g. %v", len(missing), jobCount, procFirstN(missing, 10))
	}
	if len(duplicated) > 0 {
		t.Errorf("%d of %d jobs delivered more than once within their ttr, e.g. %v", len(duplicated), jobCount, procFirstN(duplicated, 10))
	}
}

// TestProcessKill9UnderLoadLosesNoJob pushes and consumes jobs through two
// servers while one of them is killed with SIGKILL three times and
// restarted; every push acknowledged with code 0 must be delivered and
// finished in the end. Duplicates are allowed (at-least-once) and logged.
func TestProcessKill9UnderLoadLosesNoJob(t *testing.T) {
	const (
		jobCount      = 2000
		producerCount = 4
		consumerCount = 16
		kills         = 3
		// Producers are paced to about 200 pushes/s so that the kills
		// land in the middle of the run rather than after it.
		pushInterval = producerCount * 5 * time.Millisecond
	)
	topics := []string{"crash-a", "crash-b", "crash-c"}
	topicList := strings.Join(topics, ",")
	rs := redistest.Start(t)
	victim := startProcServer(t, "A", rs.Addr)
	survivor := startProcServer(t, "B", rs.Addr)
	servers := []*procServer{victim, survivor}
	api := newProcClient()
	defer api.close()

	jobs := make([]procPush, jobCount)
	for i := range jobs {
		jobs[i] = procPush{
			Topic: topics[i%len(topics)],
			ID:    "crash-" + strconv.Itoa(i),
			TTR:   int64(2 + i%2),
			Body:  "crash body " + strconv.Itoa(i),
		}
		if i%4 == 0 {
			jobs[i].DelayMS = procInt64(int64(i*7) % 1500)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	var (
		ackedMu    sync.Mutex
		acked      = make(map[string]bool, jobCount)
		ackedCount atomic.Int64
		pushErrors atomic.Int64
		popErrors  atomic.Int64
		// recoveredDeliveries counts deliveries whose attempts show an
		// earlier delivery that no consumer received.
		recoveredDeliveries atomic.Int64
		serverFails         procFailures // code 1 answers: Redis is up, so these are server faults
	)
	deliveries := newProcDeliveries(-1)

	// retryPause paces retries after a transport error (the victim is down);
	// it is not used to wait for any event.
	retryPause := func() {
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}

	ack := func(id string) {
		ackedMu.Lock()
		acked[id] = true
		ackedMu.Unlock()
		ackedCount.Add(1)
	}

	var producers sync.WaitGroup
	for p := range producerCount {
		producers.Add(1)
		go func() {
			defer producers.Done()
			ticker := time.NewTicker(pushInterval)
			defer ticker.Stop()
			for i := p; i < jobCount; i += producerCount {
				select {
				case <-ctx.Done():
					return
				case <-ticker.C:
				}
				job := jobs[i]
				for attempt := 0; ctx.Err() == nil; attempt++ {
					srv := servers[(i+attempt)%2]
					env, status, err := api.call(srv.baseURL, "/push", job, procCallTimeout)
					if err != nil {
						pushErrors.Add(1)
						retryPause()
						continue
					}
					if status != http.StatusOK || env.Code != 0 {
						serverFails.add("push %s via %s: status %d code %d %q", job.ID, srv.name, status, env.Code, env.Message)
						retryPause()
						continue
					}
					ack(job.ID)
					break
				}
			}
		}()
	}

	finish := func(id string, first int) {
		for attempt := 0; ctx.Err() == nil; attempt++ {
			srv := servers[(first+attempt)%2]
			env, status, err := api.call(srv.baseURL, "/finish", wire.IDRequest{ID: id}, procCallTimeout)
			if err != nil {
				retryPause()
				continue
			}
			if status != http.StatusOK || env.Code != 0 {
				serverFails.add("finish %s via %s: status %d code %d %q", id, srv.name, status, env.Code, env.Message)
				retryPause()
				continue
			}
			deliveries.markFinished(id)
			return
		}
	}

	consumerCtx, stopConsumers := context.WithCancel(ctx)
	defer stopConsumers()
	var consumers sync.WaitGroup
	for c := range consumerCount {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			// Each consumer goes back to its home server after a failed
			// call, so that every kill of server A cuts held pops.
			home := c % 2
			which := home
			for consumerCtx.Err() == nil {
				srv := servers[which]
				env, status, err := api.call(srv.baseURL, "/pop", wire.PopRequest{Topic: topicList, Timeout: 1}, procCallTimeout)
				if err != nil {
					popErrors.Add(1)
					if which == home {
						which = 1 - home
					} else {
						which = home
						retryPause()
					}
					continue
				}
				which = home
				if status != http.StatusOK || env.Code != 0 {
					serverFails.add("pop via %s: status %d code %d %q", srv.name, status, env.Code, env.Message)
					retryPause()
					continue
				}
				if env.dataIsNull() {
					continue
				}
				var job procPopped
				if err := json.Unmarshal(env.Data, &job); err != nil {
					serverFails.add("pop via %s: decode data %s: %v", srv.name, env.Data, err)
					continue
				}
				if seen := deliveries.delivered(job.ID); job.Attempts > seen {
					// An earlier delivery never reached a consumer: it
					// died with server A and came back after its ttr.
					recoveredDeliveries.Add(1)
				}
				finish(job.ID, which)
			}
		}()
	}

	// burst pushes burstSize ready jobs through server B at full speed and
	// counts their acknowledgements in burstAcked, so that a kill can land
	// while server A is busy claiming and answering jobs rather than
	// holding idle pops.
	const burstSize = 300
	var burstAcked atomic.Int64
	burst := func(k int) (done <-chan struct{}) {
		var pushers sync.WaitGroup
		for w := range 8 {
			pushers.Add(1)
			go func() {
				defer pushers.Done()
				for j := w; j < burstSize; j += 8 {
					job := procPush{Topic: topics[j%len(topics)], ID: fmt.Sprintf("crash-burst-%d-%d", k, j), TTR: 2, Body: "burst"}
					env, status, err := api.call(survivor.baseURL, "/push", job, procCallTimeout)
					if err != nil || status != http.StatusOK || env.Code != 0 {
						serverFails.add("burst push %s via B: status %d, %+v, %v", job.ID, status, env, err)
						continue
					}
					ack(job.ID)
					burstAcked.Add(1)
				}
			}()
		}
		finished := make(chan struct{})
		go func() {
			pushers.Wait()
			close(finished)
		}()
		return finished
	}

	// waitCount polls counter until it reaches target.
	waitCount := func(counter *atomic.Int64, target int64, what string) {
		deadline := time.Now().Add(40 * time.Second)
		for counter.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d after 40 s, waiting for %d", what, counter.Load(), target)
			}
			time.Sleep(2 * time.Millisecond) // polling interval for the counter
		}
	}

	// The kills run on the test goroutine: Start may fail the test.
	for k := 1; k <= kills; k++ {
		waitCount(&ackedCount, int64(k*jobCount/(kills+1)), fmt.Sprintf("acknowledged pushes before kill %d", k))
		burstDone := burst(k)
		waitCount(&burstAcked, int64((2*k-1)*burstSize/2), fmt.Sprintf("burst pushes before kill %d", k))
		victim.Kill()
		t.Logf("kill -9 #%d of server A after %d acknowledged pushes, in the middle of a burst", k, ackedCount.Load())
		<-burstDone
		victim.Start()
	}

	producers.Wait()
	if ctx.Err() != nil {
		t.Fatalf("producers did not finish in time: %d of %d pushes acknowledged", ackedCount.Load(), jobCount)
	}
	t.Logf("%d pushes acknowledged (%d transport errors retried)", ackedCount.Load(), pushErrors.Load())

	ackedMu.Lock()
	ackedIDs := make([]string, 0, len(acked))
	for id := range acked {
		ackedIDs = append(ackedIDs, id)
	}
	ackedMu.Unlock()

	// Jobs whose delivery died with server A come back after their ttr
	// (2–3 s); allow for that several times over.
	deadline := time.Now().Add(45 * time.Second)
	var unfinished []string
	for {
		_, finished, _ := deliveries.snapshot()
		unfinished = unfinished[:0]
		for _, id := range ackedIDs {
			if !finished[id] {
				unfinished = append(unfinished, id)
			}
		}
		if len(unfinished) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling interval for the condition
	}
	stopConsumers()
	consumers.Wait()

	counts, _, total := deliveries.snapshot()
	var lost, deliveredNotFinished []string
	duplicates := 0
	for _, id := range unfinished {
		if counts[id] == 0 {
			lost = append(lost, id)
		} else {
			deliveredNotFinished = append(deliveredNotFinished, id)
		}
	}
	for _, n := range counts {
		duplicates += n - 1
	}
	t.Logf("deliveries: %d for %d distinct jobs, %d duplicates (allowed: at-least-once), %d redelivered after a delivery lost in flight; %d pop transport errors",
		total, len(counts), duplicates, recoveredDeliveries.Load(), popErrors.Load())
	serverFails.report(t, "code-1 answers while Redis was up")
	if len(lost) > 0 {
		t.Errorf("%d of %d acknowledged jobs lost (never delivered within 45 s), e.g. %v", len(lost), len(ackedIDs), procFirstN(lost, 10))
	}
	if len(deliveredNotFinished) > 0 {
		t.Errorf("%d acknowledged jobs delivered but never finished with code 0, e.g. %v", len(deliveredNotFinished), procFirstN(deliveredNotFinished, 10))
	}
	for id := range counts {
		if !strings.HasPrefix(id, "crash-") {
			t.Errorf("delivered an id that was never pushed: %q", id)
		}
	}
}

// procHeldPop is the answer of one /pop held across a SIGTERM.
type procHeldPop struct {
	env    procEnvelope
	status int
	err    error
	at     time.Time
}

// procHoldPops starts n pops on topic with a 60 s hold and returns once the
// server has accepted every one of their connections: the requests have
// been written, and a later request on a new connection has been answered
// (the server accepts connections in order).
func procHoldPops(t *testing.T, api *procClient, srv *procServer, topic string, n int) <-chan procHeldPop {
	t.Helper()
	results := make(chan procHeldPop, n)
	var written sync.WaitGroup
	written.Add(n)
	for range n {
		go func() {
			var once sync.Once
			trace := &httptrace.ClientTrace{WroteRequest: func(httptrace.WroteRequestInfo) { once.Do(written.Done) }}
			ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.Background(), trace), 70*time.Second)
			defer cancel()
			env, status, err := api.callContext(ctx, srv.baseURL, "/pop", wire.PopRequest{Topic: topic, Timeout: 60})
			once.Do(written.Done) // the request failed before it was written
			results <- procHeldPop{env: env, status: status, err: err, at: time.Now()}
		}()
	}
	allWritten := make(chan struct{})
	go func() {
		written.Wait()
		close(allWritten)
	}()
	select {
	case <-allWritten:
	case <-time.After(10 * time.Second):
		t.Fatalf("the %d held pops were not written within 10 s", n)
	}
	probe := &procClient{http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	if err := probe.ok(srv, "/get", wire.IDRequest{ID: "probe"}); err != nil {
		t.Fatalf("probe /get: %v", err)
	}
	if len(results) > 0 {
		r := <-results
		t.Fatalf("a /pop with a 60 s hold on an empty topic answered at once: %+v %v", r.env, r.err)
	}
	return results
}

// procCheckHeldPopsReleased waits for n held pops to answer after a SIGTERM sent
// at signalled: each must answer within 5 s with code 0 and data null.
func procCheckHeldPopsReleased(t *testing.T, results <-chan procHeldPop, n int, signalled time.Time) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for i := range n {
		select {
		case r := <-results:
			switch {
			case r.err != nil:
				t.Errorf("held pop %d: no answer after SIGTERM: %v", i, r.err)
			case r.status != http.StatusOK || r.env.Code != 0 || !r.env.dataIsNull():
				t.Errorf("held pop %d after SIGTERM: status %d, %+v; want 200, code 0, data null", i, r.status, r.env)
			default:
				t.Logf("held pop %d answered %v after SIGTERM", i, r.at.Sub(signalled).Round(time.Millisecond))
			}
		case <-timeout:
			t.Errorf("only %d of %d held pops answered within 5 s of SIGTERM", i, n)
			return
		}
	}
}

// TestProcessSIGTERM checks the shutdown: held pops are answered at once
// with data null, the process exits 0, and jobs not yet popped are still
// there when the server starts again.
func TestProcessSIGTERM(t *testing.T) {
	t.Run("held pops answered", func(t *testing.T) {
		rs := redistest.Start(t)
		srv := startProcServer(t, "held", rs.Addr)
		api := newProcClient()
		defer api.close()

		const held = 10
		results := procHoldPops(t, api, srv, "nothing-here", held)
		signalled := time.Now()
		srv.signal(syscall.SIGTERM)
		procCheckHeldPopsReleased(t, results, held, signalled)
		code, ok := srv.waitExit(10 * time.Second)
		if !ok {
			t.Fatalf("process still running 10 s after SIGTERM")
		}
		if code != 0 {
			t.Errorf("exit status after SIGTERM = %d, want 0; last output:\n%s", code, procLastLines(srv.output.String(), 10))
		}
	})

	t.Run("pushed jobs survive a restart", func(t *testing.T) {
		rs := redistest.Start(t)
		srv := startProcServer(t, "survive", rs.Addr)
		api := newProcClient()
		defer api.close()

		pushed := make(map[string]procPush)
		for i := range 25 {
			job := procPush{Topic: "keep", ID: "keep-" + strconv.Itoa(i), TTR: 30, Body: "kept " + strconv.Itoa(i)}
			if i >= 20 {
				job.DelayMS = procInt64(1500)
			}
			api.mustPush(t, srv, job)
			pushed[job.ID] = job
		}
		const held = 3
		results := procHoldPops(t, api, srv, "other-topic", held)
		signalled := time.Now()
		srv.signal(syscall.SIGTERM)
		procCheckHeldPopsReleased(t, results, held, signalled)
		code, ok := srv.waitExit(10 * time.Second)
		if !ok || code != 0 {
			t.Fatalf("after SIGTERM: exited %v, status %d; want exit 0", ok, code)
		}

		srv.Start()
		deadline := time.Now().Add(20 * time.Second)
		for len(pushed) > 0 && time.Now().Before(deadline) {
			job := api.mustPop(t, srv, "keep", 5)
			if job == nil {
				continue
			}
			want, ok := pushed[job.ID]
			if !ok {
				t.Fatalf("/pop keep after restart = %+v: not pushed, or delivered twice", *job)
			}
			if job.Body != want.Body || job.Attempts != 1 {
				t.Errorf("/pop keep after restart = %+v, want body %q, attempts 1", *job, want.Body)
			}
			delete(pushed, job.ID)
			api.mustOK(t, srv, "/finish", wire.IDRequest{ID: job.ID})
		}
		if len(pushed) > 0 {
			var ids []string
			for id := range pushed {
				ids = append(ids, id)
			}
			t.Fatalf("%d jobs pushed before SIGTERM not delivered after the restart: %v", len(ids), procFirstN(ids, 10))
		}
		if job := api.mustPop(t, srv, "keep", 1); job != nil {
			t.Errorf("/pop keep after all were finished = %+v, want data null", *job)
		}
	})
}

// TestProcessRestartKeepsDelayedJobs stops the server while jobs are still
// delayed and checks that the restarted server delivers them on time, and
// never early.
func TestProcessRestartKeepsDelayedJobs(t *testing.T) {
	const (
		jobCount = 10
		delay    = 2 * time.Second
	)
	rs := redistest.Start(t)
	srv := startProcServer(t, "restart", rs.Addr)
	api := newProcClient()
	defer api.close()
	clock := procRedisConn(t, rs.Addr, 1)

	sent := procRedisNow(t, clock)
	pushed := make(map[string]bool)
	for i := range jobCount {
		id := "later-" + strconv.Itoa(i)
		api.mustPush(t, srv, procPush{Topic: "later", ID: id, Delay: int64(delay / time.Second), TTR: 30, Body: id})
		pushed[id] = true
	}
	acked := procRedisNow(t, clock)
	srv.Stop(10 * time.Second)
	srv.Start()
	ready := procRedisNow(t, clock)
	t.Logf("restart took %v", ready.Sub(acked).Round(time.Millisecond))

	if stored := api.mustGet(t, srv, "later-0"); stored == nil {
		t.Fatal("/get later-0 after restart: data null")
	} else if stored.Delay < sent.Add(delay).Unix() || stored.Delay > acked.Add(delay).Unix()+1 {
		t.Errorf("/get later-0 delay = %d, want %d..%d", stored.Delay, sent.Add(delay).Unix(), acked.Add(delay).Unix()+1)
	}

	// On time: by the later of the due time and the restart, plus the 1 s
	// safety-net scan at the very worst.
	latestDue := acked.Add(delay)
	if ready.After(latestDue) {
		latestDue = ready
	}
	onTimeLimit := latestDue.Add(time.Second)
	deadline := time.Now().Add(15 * time.Second)
	for len(pushed) > 0 && time.Now().Before(deadline) {
		job := api.mustPop(t, srv, "later", 5)
		at := procRedisNow(t, clock)
		if job == nil {
			continue
		}
		if !pushed[job.ID] {
			t.Fatalf("/pop later = %+v: not pushed, or delivered twice", *job)
		}
		delete(pushed, job.ID)
		if at.Before(sent.Add(delay)) {
			t.Errorf("%s delivered %v after the first push, before its %v delay", job.ID, at.Sub(sent), delay)
		}
		if at.After(onTimeLimit) {
			t.Errorf("%s delivered %v after the later of its due time and the restart, want within 1 s", job.ID, at.Sub(latestDue))
		}
		api.mustOK(t, srv, "/finish", wire.IDRequest{ID: job.ID})
	}
	if len(pushed) > 0 {
		t.Errorf("%d delayed jobs not delivered after the restart", len(pushed))
	}
}

// TestProcessRedisOutage stops Redis under a running server: requests fail
// with a clear code-1 answer, the process stays up, and once Redis is back
// on the same port (with its AOF) the server serves again by itself and the
// jobs pushed before the outage are delivered.
func TestProcessRedisOutage(t *testing.T) {
	rs := redistest.Start(t, "appendonly yes", "appendfsync always")
	srv := startProcServer(t, "outage", rs.Addr)
	api := newProcClient()
	defer api.close()

	api.mustPush(t, srv, procPush{Topic: "outage", ID: "before-ready", TTR: 30, Body: "ready before the outage"})
	api.mustPush(t, srv, procPush{Topic: "outage", ID: "before-delayed", DelayMS: procInt64(1500), TTR: 30, Body: "due during the outage"})

	rs.Stop()
	env, status, err := api.call(srv.baseURL, "/push", procPush{Topic: "outage", ID: "during", TTR: 30, Body: "x"}, 15*time.Second)
	if err != nil {
		t.Fatalf("/push while Redis is down: no answer: %v", err)
	}
	if status != http.StatusOK || env.Code != 1 || !strings.Contains(strings.ToLower(env.Message), "redis") {
		t.Errorf("/push while Redis is down: status %d, %+v; want 200, code 1 and a message naming Redis", status, env)
	}

	// A pop must hold for its timeout while Redis is away, not fail at
	// once and make clients spin.
	popStart := time.Now()
	_, _, err = api.call(srv.baseURL, "/pop", wire.PopRequest{Topic: "outage-empty", Timeout: 2}, 15*time.Second)
	if held := time.Since(popStart); err == nil && held < 1900*time.Millisecond {
		t.Errorf("/pop with timeout 2 while Redis is down answered after %v, want it to hold about 2 s", held)
	}
	if !srv.running() {
		t.Fatalf("server exited while Redis was down (%v)", srv.exitErr())
	}

	rs.Restart(t)
	redisBack := time.Now()
	deadline := redisBack.Add(20 * time.Second)
	for {
		env, status, err := api.call(srv.baseURL, "/push", procPush{Topic: "outage", ID: "after", TTR: 30, Body: "pushed after the outage"}, procCallTimeout)
		if err == nil && status == http.StatusOK && env.Code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/push still failing 20 s after Redis came back: status %d, %+v, %v", status, env, err)
		}
		time.Sleep(100 * time.Millisecond) // polling interval for recovery
	}
	t.Logf("push succeeded again %v after Redis restarted", time.Since(redisBack).Round(time.Millisecond))

	want := map[string]string{
		"before-ready":   "ready before the outage",
		"before-delayed": "due during the outage",
		"after":          "pushed after the outage",
	}
	deadline = time.Now().Add(20 * time.Second)
	for len(want) > 0 && time.Now().Before(deadline) {
		job, _, err := api.pop(srv, "outage", 5)
		if err != nil {
			t.Logf("/pop after recovery: %v", err)
			continue
		}
		if job == nil {
			continue
		}
		if job.ID == "during" {
			t.Errorf("/pop delivered %q, whose push failed with code 1", job.ID)
			continue
		}
		body, ok := want[job.ID]
		if !ok {
			t.Fatalf("/pop outage = %+v: unexpected or delivered twice", *job)
		}
		if job.Body != body {
			t.Errorf("/pop %s body = %q, want %q", job.ID, job.Body, body)
		}
		delete(want, job.ID)
		api.mustOK(t, srv, "/finish", wire.IDRequest{ID: job.ID})
	}
	if len(want) > 0 {
		t.Errorf("jobs not delivered after Redis came back: %v", want)
	}
	if !srv.running() || srv.runCount != 1 {
		t.Errorf("server was not the same process throughout (running %v, started %d times)", srv.running(), srv.runCount)
	}
}

// TestProcessRedisDownAtStartup starts the server with nothing listening on
// its Redis address: it must exit non-zero with an error naming the address
// and no stack trace.
func TestProcessRedisDownAtStartup(t *testing.T) {
	redisAddr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
	srv := newProcServer(t, "no-redis", redisAddr)
	srv.launch()
	code, ok := srv.waitExit(20 * time.Second)
	if !ok {
		t.Fatalf("server still running 20 s after start with Redis down at %s", redisAddr)
	}
	out := srv.output.String()
	if code == 0 {
		t.Errorf("exit status 0 with Redis down, want non-zero")
	}
	if !strings.Contains(out, redisAddr) {
		t.Errorf("output does not name the Redis address %s:\n%s", redisAddr, out)
	}
	if strings.Contains(out, "panic:") || strings.Contains(out, "goroutine ") {
		t.Errorf("output has a panic or stack trace:\n%s", out)
	}
	t.Logf("exit status %d, output:\n%s", code, procLastLines(out, 5))
}

// procLegacyJob is the original server's job as its msgpack library stored it:
// a map keyed by the Go field names, Delay being the due time in unix
// seconds.
type procLegacyJob struct {
	Topic string
	ID    string
	Delay int64
	TTR   int64
	Body  string
}

// encode writes the job as github.com/vmihailenco/msgpack did for the
// original's untagged struct: a fixmap of five entries in field order.
// fixedWidthInts writes integers as int64 (0xd3) as later versions of the
// library do by default; otherwise in the smallest form.
func (j procLegacyJob) encode(fixedWidthInts bool) []byte {
	b := []byte{0x85}
	b = procAppendMsgpackString(b, "Topic")
	b = procAppendMsgpackString(b, j.Topic)
	b = procAppendMsgpackString(b, "Id")
	b = procAppendMsgpackString(b, j.ID)
	b = procAppendMsgpackString(b, "Delay")
	b = procAppendMsgpackInt(b, j.Delay, fixedWidthInts)
	b = procAppendMsgpackString(b, "TTR")
	b = procAppendMsgpackInt(b, j.TTR, fixedWidthInts)
	b = procAppendMsgpackString(b, "Body")
	return procAppendMsgpackString(b, j.Body)
}

func procAppendMsgpackString(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 1<<8:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

func procAppendMsgpackInt(b []byte, v int64, fixedWidth bool) []byte {
	switch {
	case fixedWidth || v < 0:
		b = append(b, 0xd3)
		return binary.BigEndian.AppendUint64(b, uint64(v))
	case v < 1<<7:
		return append(b, byte(v))
	case v < 1<<8:
		return append(b, 0xcc, byte(v))
	case v < 1<<16:
		b = append(b, 0xcd)
		return binary.BigEndian.AppendUint16(b, uint16(v))
	case v < 1<<32:
		b = append(b, 0xce)
		return binary.BigEndian.AppendUint32(b, uint32(v))
	default:
		b = append(b, 0xcf)
		return binary.BigEndian.AppendUint64(b, uint64(v))
	}
}

// TestProcessImportsLegacyJobs writes jobs in the original server's exact
// Redis layout (db 1, raw-id keys holding msgpack, buckets scored in
// seconds, ids in the ready list) and checks that the new server shows and
// delivers every one of them, none early, and leaves nothing behind once
// they are finished.
func TestProcessImportsLegacyJobs(t *testing.T) {
	rs := redistest.Start(t)
	conn := procRedisConn(t, rs.Addr, 1)
	now := procRedisNow(t, conn).Unix()

	type fixture struct {
		job        procLegacyJob
		fixedWidth bool
		bucket     string // bucket key, or "" for a job in the ready list
		score      int64  // bucket score: unix seconds
	}
	fixtures := []fixture{
		// Due 10 s ago, never picked up.
		{job: procLegacyJob{Topic: "legacy", ID: "L1", Delay: now - 10, TTR: 30, Body: "first legacy body"},
			bucket: "dq_bucket_1", score: now - 10},
		// Due in 2 s; a 40-byte body (str8) and int64-encoded integers.
		{job: procLegacyJob{Topic: "legacy", ID: "L2", Delay: now + 2, TTR: 300, Body: strings.Repeat("forty by", 5)},
			fixedWidth: true, bucket: "dq_bucket_2", score: now + 2},
		// In the ready list; a 300-byte UTF-8 body (str16).
		{job: procLegacyJob{Topic: "order", ID: "L3", Delay: now - 5, TTR: 60, Body: strings.Repeat("заказ ✓ ", 20)}},
		// Popped by the original server, its ttr lease ends in 1 s: the
		// bucket score is the redelivery time, Delay the original due time.
		{job: procLegacyJob{Topic: "order", ID: "L4", Delay: now - 20, TTR: 21, Body: ""},
			fixedWidth: true, bucket: "dq_bucket_3", score: now + 1},
	}
	for _, f := range fixtures {
		payload := f.job.encode(f.fixedWidth)
		// Check the fixture itself with Redis' own msgpack decoder, so that
		// a failure below is the server's and not the encoder's.
		decoded, err := redis.Strings(conn.Do("EVAL",
			"local j = cmsgpack.unpack(ARGV[1]) return {j.Topic, j.Id, tostring(j.Delay), tostring(j.TTR), j.Body}", 0, payload))
		wantDecoded := []string{f.job.Topic, f.job.ID, strconv.FormatInt(f.job.Delay, 10), strconv.FormatInt(f.job.TTR, 10), f.job.Body}
		if err != nil || strings.Join(decoded, "|") != strings.Join(wantDecoded, "|") {
			t.Fatalf("fixture %s does not decode as msgpack: %q, %v; want %q", f.job.ID, decoded, err, wantDecoded)
		}
		if _, err := conn.Do("SET", f.job.ID, payload); err != nil {
			t.Fatalf("SET %s: %v", f.job.ID, err)
		}
		if f.bucket == "" {
			_, err = conn.Do("RPUSH", "dq_queue_"+f.job.Topic, f.job.ID)
		} else {
			_, err = conn.Do("ZADD", f.bucket, f.score, f.job.ID)
		}
		if err != nil {
			t.Fatalf("place %s: %v", f.job.ID, err)
		}
	}

	srv := startProcServer(t, "legacy", rs.Addr)
	api := newProcClient()
	defer api.close()
	// The server logs the import before it answers job requests, but its
	// output reaches the test through a pipe that may lag the readiness
	// probe's answer.
	redistest.WaitFor(t, 5*time.Second, "the start-up output to log the import", func() bool {
		return strings.Contains(strings.ToLower(srv.output.String()), "import")
	})

	for _, f := range fixtures {
		stored := api.mustGet(t, srv, f.job.ID)
		if stored == nil {
			t.Errorf("/get %s after start-up: data null, want the imported job", f.job.ID)
			continue
		}
		if stored.ID != f.job.ID || stored.Topic != f.job.Topic || stored.TTR != f.job.TTR || stored.Body != f.job.Body {
			t.Errorf("/get %s = %+v, want topic %q, ttr %d, body %q", f.job.ID, *stored, f.job.Topic, f.job.TTR, f.job.Body)
		}
		if f.job.ID == "L2" && stored.Delay != f.score {
			t.Errorf("/get L2 delay = %d, want its due time %d", stored.Delay, f.score)
		}
	}

	remaining := make(map[string]fixture)
	for _, f := range fixtures {
		remaining[f.job.ID] = f
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(remaining) > 0 && time.Now().Before(deadline) {
		job := api.mustPop(t, srv, "legacy,order", 5)
		at := procRedisNow(t, conn)
		if job == nil {
			continue
		}
		f, ok := remaining[job.ID]
		if !ok {
			t.Fatalf("/pop = %+v: not in the fixture, or delivered twice", *job)
		}
		delete(remaining, job.ID)
		if job.Topic != f.job.Topic || job.Body != f.job.Body || job.TTR != f.job.TTR {
			t.Errorf("/pop %s = %+v, want topic %q, ttr %d, body %q", job.ID, *job, f.job.Topic, f.job.TTR, f.job.Body)
		}
		if f.bucket != "" && at.Before(time.Unix(f.score, 0)) {
			t.Errorf("%s delivered at %v, before its bucket time %v", job.ID, at.Format(time.StampMilli), time.Unix(f.score, 0).Format(time.StampMilli))
		}
		api.mustOK(t, srv, "/finish", wire.IDRequest{ID: job.ID})
	}
	if len(remaining) > 0 {
		var ids []string
		for id := range remaining {
			ids = append(ids, id)
		}
		t.Fatalf("legacy jobs never delivered: %v", procFirstN(ids, 10))
	}
	if job := api.mustPop(t, srv, "legacy,order", 1); job != nil {
		t.Errorf("/pop after every legacy job was finished = %+v, want data null", *job)
	}

	// Finished means nothing of the job is left, old layout included.
	for _, f := range fixtures {
		if n, err := redis.Int(conn.Do("EXISTS", f.job.ID)); err != nil || n != 0 {
			t.Errorf("raw key %s still exists after finish (EXISTS %d, %v)", f.job.ID, n, err)
		}
		for _, bucket := range []string{"dq_bucket_1", "dq_bucket_2", "dq_bucket_3"} {
			if _, err := redis.Int64(conn.Do("ZSCORE", bucket, f.job.ID)); err != redis.ErrNil {
				t.Errorf("%s still holds %s after finish (%v)", bucket, f.job.ID, err)
			}
		}
		for _, list := range []string{"dq_queue_legacy", "dq_queue_order"} {
			if pos, err := conn.Do("LPOS", list, f.job.ID); err != nil || pos != nil {
				t.Errorf("%s still holds %s after finish (LPOS %v, %v)", list, f.job.ID, pos, err)
			}
		}
	}
}
