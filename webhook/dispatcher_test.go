package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

var allowLoopback = []string{"127.0.0.1"}

func TestRetriesFollowTheScheduleThenSucceed(t *testing.T) {
	t.Parallel()
	redistest.ForEach(t, redistest.StandaloneBackends(), func(t *testing.T, redis *redistest.Redis) {
		const secret = "s3cret"
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
			if n <= 2 {
				answer(w, http.StatusServiceUnavailable, "busy")
				return
			}
			answer(w, http.StatusNoContent, "")
		})
		logger, warns := testLogger(t)
		q, ro := newQueue(t, redis.Addr, logger)
		metrics := newFakeMetrics()
		startDispatcher(t, q, ro, Options{Secret: secret, Allow: allowLoopback, Metrics: metrics}, logger)

		body := `{"out_trade_no":"42","trade_status":"TRADE_SUCCESS"}`
		mustPush(t, q, delayqueue.Job{Topic: "alipay", ID: "pay-1", Body: body, Retry: []int{1, 1},
			Callback: &delayqueue.Callback{URL: rc.url("/notify?token=abc"), TimeoutSeconds: 2,
				Headers: map[string]string{"Authorization": "Bearer t", "Content-Type": "application/json"}}})

		// Between the first and the second call, /get shows the failure.
		redistest.WaitFor(t, 5*time.Second, "the first failed call to be recorded", func() bool {
			info := mustGet(t, q, "pay-1")
			return info != nil && info.LastStatus == 503
		})
		info := mustGet(t, q, "pay-1")
		if info.Attempts != 1 || info.LastError != "503 Service Unavailable" || info.LastResponse != "busy" || info.State == delayqueue.StateDead {
			t.Errorf("after the first failure: %s response=%q", describe(info), info.LastResponse)
		}

		redistest.WaitFor(t, 10*time.Second, "the job to be finished", func() bool { return mustGet(t, q, "pay-1") == nil })
		calls := rc.callsFor("pay-1")
		if len(calls) != 3 {
			t.Fatalf("receiver got %d calls, want 3", len(calls))
		}
		for i, c := range calls {
			if c.Attempt != strconv.Itoa(i+1) || c.Topic != "alipay" || c.Method != http.MethodPost || c.Body != body {
				t.Errorf("call %d: attempt=%s topic=%s method=%s body=%q", i+1, c.Attempt, c.Topic, c.Method, c.Body)
			}
			if c.Header.Get("Authorization") != "Bearer t" || c.Header.Get("Content-Type") != "application/json" || c.Path != "/notify" {
				t.Errorf("call %d: user headers or path lost: %v %s", i+1, c.Header, c.Path)
			}
			ts, err := strconv.ParseInt(c.Timestamp, 10, 64)
			if err != nil || time.Since(time.Unix(ts, 0)).Abs() > 5*time.Second {
				t.Errorf("call %d: timestamp %q is not the unix time of the call", i+1, c.Timestamp)
			}
			mac := hmac.New(sha256.New, []byte(secret))
			mac.Write([]byte(c.Timestamp + "." + c.Body))
			if want := hex.EncodeToString(mac.Sum(nil)); c.Signature != want {
				t.Errorf("call %d: signature %q, want %q", i+1, c.Signature, want)
			}
			if i > 0 {
				// retry [1, 1]: one second after the failure, give or take a scan.
				if gap := c.At.Sub(calls[i-1].At); gap < 900*time.Millisecond || gap > 4*time.Second {
					t.Errorf("call %d came %s after the previous one, want about 1s", i+1, gap)
				}
			}
		}
		if n := warns.count("callback failed"); n != 2 {
			t.Errorf("%d warn lines for failed calls, want 2", n)
		}
		if metrics.count(Result5xx) != 2 || metrics.count(Result2xx) != 1 {
			t.Errorf("metrics = %v", metrics.results)
		}
	})
}

func TestDeadLetteredWhenTheReceiverNeverSucceeds(t *testing.T) {
	t.Parallel()
	redistest.ForEach(t, redistest.StandaloneBackends(), func(t *testing.T, redis *redistest.Redis) {
		long := strings.Repeat("é", 1500) // 3000 bytes: the kept 1 KiB must not split a character
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
			answer(w, http.StatusInternalServerError, long)
		})
		logger, warns := testLogger(t)
		q, ro := newQueue(t, redis.Addr, logger)
		startDispatcher(t, q, ro, Options{Allow: allowLoopback}, logger)
		mustPush(t, q, delayqueue.Job{ID: "never", Body: "b", Retry: []int{1},
			Callback: &delayqueue.Callback{URL: rc.url("/hook"), Method: http.MethodPut, TimeoutSeconds: 2}})

		redistest.WaitFor(t, 10*time.Second, "the job to be dead-lettered", func() bool {
			info := mustGet(t, q, "never")
			return info != nil && info.State == delayqueue.StateDead
		})
		info := mustGet(t, q, "never")
		if info.DeadReason != delayqueue.ReasonCallbackFailed || info.Attempts != 2 || info.LastStatus != 500 ||
			info.LastError != "500 Internal Server Error" || info.Callback == nil {
			t.Errorf("dead letter: %s", describe(info))
		}
		if want := strings.Repeat("é", 512); info.LastResponse != want {
			t.Errorf("last response has %d bytes, want the first 1 KiB (%d bytes)", len(info.LastResponse), len(want))
		}
		calls := rc.callsFor("never")
		if len(calls) != 2 || calls[0].Method != http.MethodPut || calls[1].Attempt != "2" || calls[0].Signature != "" {
			t.Errorf("calls = %+v (want 2 PUTs, no signature without a secret)", calls)
		}
		redistest.WaitFor(t, time.Second, "two warn lines", func() bool { return warns.count("callback failed") == 2 })
	})
}

// TestCallOutcomes covers one call each: what a failure records, and the
// redirect and allowlist cases that succeed.
func TestCallOutcomes(t *testing.T) {
	t.Parallel()
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	respond := func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/ok":
			answer(w, http.StatusOK, "ok")
		case "/moved":
			http.Redirect(w, r, "/ok", http.StatusMovedPermanently)
		case "/to-metadata":
			http.Redirect(w, r, "http://169.254.169.254/latest/meta-data/", http.StatusFound)
		case "/loop":
			http.Redirect(w, r, "/loop", http.StatusTemporaryRedirect)
		case "/slow":
			select {
			case <-r.Context().Done():
			case <-hold:
			}
		case "/missing":
			http.NotFound(w, r)
		}
	}
	closedPort := strconv.Itoa(redistest.FreePort(t))
	cases := []struct {
		name     string
		allow    []string
		url      func(rc *receiver) string
		follow   bool
		timeout  int
		finished bool   // else dead after its one attempt
		status   int    // recorded status, for failures
		errText  string // part of the recorded error, for failures
		result   string // metrics class
		paths    string // the receiver's paths, comma-separated
	}{
		{name: "2xx", allow: allowLoopback, url: func(rc *receiver) string { return rc.url("/ok") },
			finished: true, result: Result2xx, paths: "/ok"},
		{name: "404", allow: allowLoopback, url: func(rc *receiver) string { return rc.url("/missing") },
			status: 404, errText: "404 Not Found", result: Result4xx, paths: "/missing"},
		{name: "receiver timeout", allow: allowLoopback, url: func(rc *receiver) string { return rc.url("/slow") }, timeout: 1,
			errText: "timeout: no answer within 1s", result: ResultTimeout, paths: "/slow"},
		{name: "closed port", allow: allowLoopback, url: func(*receiver) string { return "http://127.0.0.1:" + closedPort + "/" },
			errText: "connection refused", result: ResultConnectionError},
		{name: "301 not followed", allow: allowLoopback, url: func(rc *receiver) string { return rc.url("/moved") },
			status: 301, errText: `redirect not followed (follow_redirects is false): 301 Moved Permanently to "/ok"`, result: Result3xx, paths: "/moved"},
		{name: "301 followed", allow: allowLoopback, url: func(rc *receiver) string { return rc.url("/moved") }, follow: true,
			finished: true, result: Result2xx, paths: "/moved,/ok"},
		{name: "redirect to a refused address", allow: allowLoopback, url: func(rc *receiver) string { return rc.url("/to-metadata") }, follow: true,
			errText: "address refused: 169.254.169.254 is link-local", result: ResultRefused, paths: "/to-metadata"},
		{name: "redirect loop", allow: allowLoopback, url: func(rc *receiver) string { return rc.url("/loop") }, follow: true,
			status: 307, errText: "stopped after 5 redirects", result: Result3xx, paths: "/loop,/loop,/loop,/loop,/loop,/loop"},
		{name: "loopback refused without allow", url: func(rc *receiver) string { return rc.url("/ok") },
			errText: "address refused: 127.0.0.1 is loopback; list it in callback_allow", result: ResultRefused},
		{name: "a name resolving to loopback is refused", url: func(rc *receiver) string { return "http://localhost:" + rc.port() + "/ok" },
			errText: "is loopback", result: ResultRefused},
		{name: "another loopback address is not allowed by 127.0.0.1", allow: allowLoopback,
			url:     func(rc *receiver) string { return "http://127.0.0.2:" + rc.port() + "/ok" },
			errText: "127.0.0.2 is loopback", result: ResultRefused},
		{name: "host allowed by name", allow: []string{"localhost"}, url: func(rc *receiver) string { return "http://localhost:" + rc.port() + "/ok" },
			finished: true, result: Result2xx, paths: "/ok"},
		{name: "loopback allowed by CIDR", allow: []string{"127.0.0.0/8"}, url: func(rc *receiver) string { return rc.url("/ok") },
			finished: true, result: Result2xx, paths: "/ok"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rc := newReceiver(t, respond)
			logger, warns := testLogger(t)
			q, ro := newQueue(t, redistest.Mini(t).Addr(), logger)
			metrics := newFakeMetrics()
			startDispatcher(t, q, ro, Options{Allow: tc.allow, Metrics: metrics}, logger)
			mustPush(t, q, delayqueue.Job{ID: "j", Body: "body", MaxAttempts: 1,
				Callback: &delayqueue.Callback{URL: tc.url(rc), FollowRedirects: tc.follow, TimeoutSeconds: tc.timeout}})

			start := time.Now()
			var info *delayqueue.JobInfo
			redistest.WaitFor(t, 10*time.Second, "the call's outcome", func() bool {
				info = mustGet(t, q, "j")
				return info == nil || info.State == delayqueue.StateDead
			})
			elapsed := time.Since(start)
			switch {
			case tc.finished && info != nil:
				t.Fatalf("want the job finished, got %s", describe(info))
			case !tc.finished && info == nil:
				t.Fatal("want the job dead-lettered, it was finished")
			case !tc.finished:
				if info.DeadReason != delayqueue.ReasonCallbackFailed || info.LastStatus != tc.status || !strings.Contains(info.LastError, tc.errText) {
					t.Errorf("got %s, want status %d and an error containing %q", describe(info), tc.status, tc.errText)
				}
				// The line is written once the failure is recorded.
				redistest.WaitFor(t, time.Second, "one warn line", func() bool { return warns.count("callback failed") == 1 })
			}
			var paths []string
			for _, c := range rc.allCalls() {
				paths = append(paths, c.Path)
			}
			if got := strings.Join(paths, ","); got != tc.paths {
				t.Errorf("receiver paths %q, want %q", got, tc.paths)
			}
			redistest.WaitFor(t, time.Second, "the metrics observation", func() bool { return metrics.total() == 1 })
			if metrics.count(tc.result) != 1 {
				t.Errorf("metrics = %v, want one %s", metrics.results, tc.result)
			}
			if tc.timeout == 1 && (elapsed < 900*time.Millisecond || elapsed > 5*time.Second) {
				t.Errorf("a 1 s timeout took %s", elapsed)
			}
		})
	}
}

func TestWakeUpCallsWithoutWaitingForTheSafetyNet(t *testing.T) {
	t.Parallel()
	redistest.ForEach(t, redistest.StandaloneBackends(), func(t *testing.T, redis *redistest.Redis) {
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) { answer(w, http.StatusOK, "") })
		logger, _ := testLogger(t)
		q, ro := newQueue(t, redis.Addr, logger)
		// With a 30 s safety net, only the wake-up can make the call quick.
		startDispatcher(t, q, ro, Options{Allow: allowLoopback, WakeTimeout: 30 * time.Second}, logger)
		for i := range 3 {
			// Push only once the dispatcher waits: a job pushed while it is
			// still claiming is taken without a wake-up.
			redistest.WaitFor(t, 5*time.Second, "the dispatcher waiting for callback jobs", q.WaitingForCallbacks)
			id := fmt.Sprintf("w%d", i)
			pushed := time.Now()
			mustPush(t, q, delayqueue.Job{ID: id, Callback: &delayqueue.Callback{URL: rc.url("/ok")}})
			redistest.WaitFor(t, 3*time.Second, "the call", func() bool { return len(rc.callsFor(id)) == 1 })
			if took := rc.callsFor(id)[0].At.Sub(pushed); took > time.Second {
				t.Errorf("call %s came %s after the push", id, took)
			}
		}
	})
}

func TestConcurrencyLimits(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(40 * time.Millisecond)
		answer(w, http.StatusOK, "")
	})
	logger, _ := testLogger(t)
	q, ro := newQueue(t, redistest.Mini(t).Addr(), logger)
	startDispatcher(t, q, ro, Options{Allow: []string{"127.0.0.1", "localhost"}, Concurrency: 3, PerHost: 2}, logger)
	var ids []string
	for i := range 24 {
		host := "127.0.0.1"
		if i%2 == 1 {
			host = "localhost" // another destination host, same server
		}
		id := fmt.Sprintf("c%d", i)
		ids = append(ids, id)
		mustPush(t, q, delayqueue.Job{ID: id, Callback: &delayqueue.Callback{URL: "http://" + host + ":" + rc.port() + "/ok"}})
	}
	redistest.WaitFor(t, 10*time.Second, "every job finished", func() bool {
		for _, id := range ids {
			if mustGet(t, q, id) != nil {
				return false
			}
		}
		return true
	})
	total, perHost := rc.maxima()
	if total > 3 || total < 2 {
		t.Errorf("at most %d calls at once, want 2 or 3 (global limit 3)", total)
	}
	for host, n := range perHost {
		if n > 2 {
			t.Errorf("%d calls at once to %s, want at most 2", n, host)
		}
	}
	if len(rc.allCalls()) != 24 {
		t.Errorf("%d calls, want 24", len(rc.allCalls()))
	}
}

// heldReceiver is a receiver whose calls wait until release (or the
// test's end), then answer 200.
func heldReceiver(t *testing.T) (rc *receiver, release func()) {
	t.Helper()
	released := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(released) }) }
	rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		select {
		case <-released:
		case <-r.Context().Done():
		}
		answer(w, http.StatusOK, "")
	})
	t.Cleanup(release)
	return rc, release
}

func TestWaitingJobKeepsItsLease(t *testing.T) {
	t.Parallel()
	rc, release := heldReceiver(t)
	logger, _ := testLogger(t)
	q, ro := newQueue(t, redistest.Mini(t).Addr(), logger)
	startDispatcher(t, q, ro, Options{Allow: allowLoopback, PerHost: 1}, logger,
		func(d *Dispatcher) { d.leaseRenewAfter = 100 * time.Millisecond })
	for _, id := range []string{"a", "b"} {
		mustPush(t, q, delayqueue.Job{ID: id, Callback: &delayqueue.Callback{URL: rc.url("/ok"), TimeoutSeconds: 5}})
	}
	redistest.WaitFor(t, 5*time.Second, "the first call", func() bool { return len(rc.allCalls()) == 1 })
	waiting := "a"
	if rc.allCalls()[0].ID == "a" {
		waiting = "b"
	}
	var first time.Time
	redistest.WaitFor(t, 5*time.Second, "the waiting job to be claimed", func() bool {
		info := mustGet(t, q, waiting)
		first = info.LeaseUntil
		return info.State == delayqueue.StateReserved
	})
	redistest.WaitFor(t, 5*time.Second, "the waiting job's lease to be renewed", func() bool {
		return mustGet(t, q, waiting).LeaseUntil.After(first.Add(300 * time.Millisecond))
	})
	if len(rc.allCalls()) != 1 {
		t.Fatalf("the waiting job was called while its host was busy")
	}
	release()
	redistest.WaitFor(t, 5*time.Second, "both jobs finished", func() bool {
		return mustGet(t, q, "a") == nil && mustGet(t, q, "b") == nil
	})
	if len(rc.callsFor("a")) != 1 || len(rc.callsFor("b")) != 1 {
		t.Errorf("calls: a=%d b=%d, want one each", len(rc.callsFor("a")), len(rc.callsFor("b")))
	}
}

// A call that answers 2xx after its job was pushed again (same id) leaves
// the new job alone: the call's attempt and the job's creation time are its
// receipt.
func TestACallEndingAfterItsJobWasPushedAgainLeavesTheNewJob(t *testing.T) {
	t.Parallel()
	redistest.ForEach(t, redistest.StandaloneBackends(), func(t *testing.T, redis *redistest.Redis) {
		rc, release := heldReceiver(t)
		logger, lines := testLogger(t)
		q, ro := newQueue(t, redis.Addr, logger)
		startDispatcher(t, q, ro, Options{Allow: allowLoopback}, logger)
		cb := &delayqueue.Callback{URL: rc.url("/ok"), TimeoutSeconds: 10}
		mustPush(t, q, delayqueue.Job{Topic: "again", ID: "again-1", Body: "v1", Callback: cb})
		redistest.WaitFor(t, 5*time.Second, "the first call", func() bool { return rc.inFlightNow() == 1 })

		mustPush(t, q, delayqueue.Job{Topic: "again", ID: "again-1", Body: "v2", Delay: time.Hour, Callback: cb})
		release()
		redistest.WaitFor(t, 5*time.Second, "the call's 2xx to be reported", func() bool {
			return lines.count("callback answered 2xx after its job moved on; the job is left as it is") == 1
		})
		if info := mustGet(t, q, "again-1"); info == nil || info.Body != "v2" || info.State != delayqueue.StateDelay {
			t.Fatalf("the job pushed again during the call is %s, want v2 waiting for its delay", describe(info))
		}
	})
}

func TestShutdown(t *testing.T) {
	t.Parallel()
	t.Run("calls in flight finish within the grace", func(t *testing.T) {
		t.Parallel()
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
			time.Sleep(300 * time.Millisecond)
			answer(w, http.StatusOK, "")
		})
		logger, _ := testLogger(t)
		q, ro := newQueue(t, redistest.Mini(t).Addr(), logger)
		r := startDispatcher(t, q, ro, Options{Allow: allowLoopback, ShutdownGrace: 5 * time.Second}, logger)
		mustPush(t, q, delayqueue.Job{ID: "s", Callback: &delayqueue.Callback{URL: rc.url("/ok")}})
		redistest.WaitFor(t, 5*time.Second, "the call to start", func() bool { return rc.inFlightNow() == 1 })
		if took := r.stop(t); took > 3*time.Second {
			t.Errorf("Run took %s to return", took)
		}
		if info := mustGet(t, q, "s"); info != nil {
			t.Errorf("the call answered 200 within the grace, yet the job is %s", describe(info))
		}
	})
	t.Run("calls cut by shutdown and waiting jobs are given back", func(t *testing.T) {
		t.Parallel()
		var succeed sync.Once
		succeeding := make(chan struct{})
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
			select {
			case <-succeeding:
				answer(w, http.StatusOK, "")
			default:
				<-r.Context().Done() // hangs until the dispatcher gives up
			}
		})
		logger, _ := testLogger(t)
		q, ro := newQueue(t, redistest.Mini(t).Addr(), logger)
		r := startDispatcher(t, q, ro, Options{Allow: allowLoopback, PerHost: 1, ShutdownGrace: 200 * time.Millisecond}, logger)
		for _, id := range []string{"x", "y"} {
			mustPush(t, q, delayqueue.Job{ID: id, Retry: []int{60, 60},
				Callback: &delayqueue.Callback{URL: rc.url("/hang"), TimeoutSeconds: 30}})
		}
		redistest.WaitFor(t, 5*time.Second, "one call in flight and the other job waiting", func() bool {
			x, y := mustGet(t, q, "x"), mustGet(t, q, "y")
			return rc.inFlightNow() == 1 && x.State == delayqueue.StateReserved && y.State == delayqueue.StateReserved
		})
		if took := r.stop(t); took > 2*time.Second {
			t.Errorf("Run took %s to return with a 200ms grace", took)
		}
		for _, id := range []string{"x", "y"} {
			info := mustGet(t, q, id)
			if info == nil || info.State != delayqueue.StateReady || info.LastError != "" || info.Attempts != 0 {
				t.Errorf("%s after shutdown: %s, want ready at once, the cut attempt not counted nor recorded as the receiver's failure", id, describe(info))
			}
		}
		succeed.Do(func() { close(succeeding) })
		startDispatcher(t, q, ro, Options{Allow: allowLoopback}, logger)
		redistest.WaitFor(t, 5*time.Second, "both jobs delivered by the next dispatcher", func() bool {
			return mustGet(t, q, "x") == nil && mustGet(t, q, "y") == nil
		})
		if len(rc.allCalls()) != 3 {
			t.Errorf("%d calls, want 3 (one cut, two after the restart)", len(rc.allCalls()))
		}
	})
}

func TestTwoDispatchersShareTheWork(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		time.Sleep(10 * time.Millisecond)
		answer(w, http.StatusOK, "")
	})
	logger, _ := testLogger(t)
	var metrics []*fakeMetrics
	var queues []*delayqueue.Queue
	for range 2 {
		q, ro := newQueue(t, srv.Addr, logger)
		m := newFakeMetrics()
		startDispatcher(t, q, ro, Options{Allow: allowLoopback, Concurrency: 6, PerHost: 3, Metrics: m}, logger)
		metrics = append(metrics, m)
		queues = append(queues, q)
	}
	const jobs = 150
	for i := range jobs {
		mustPush(t, queues[i%2], delayqueue.Job{ID: fmt.Sprintf("j%d", i), Body: strconv.Itoa(i),
			Callback: &delayqueue.Callback{URL: rc.url("/ok")}})
	}
	redistest.WaitFor(t, 20*time.Second, "every callback received", func() bool { return len(rc.allCalls()) >= jobs })
	redistest.WaitFor(t, 5*time.Second, "every job finished", func() bool {
		for i := range jobs {
			if mustGet(t, queues[0], fmt.Sprintf("j%d", i)) != nil {
				return false
			}
		}
		return true
	})
	for i := range jobs {
		if n := len(rc.callsFor(fmt.Sprintf("j%d", i))); n != 1 {
			t.Errorf("job j%d was called %d times, want once", i, n)
		}
	}
	if metrics[0].total()+metrics[1].total() != jobs || metrics[0].total() == 0 || metrics[1].total() == 0 {
		t.Errorf("calls per dispatcher: %d and %d, want both working and %d in all", metrics[0].total(), metrics[1].total(), jobs)
	}
}
