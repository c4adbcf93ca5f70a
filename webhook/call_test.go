package webhook

import (
	"net/http"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// TestRedirectWithCredentialsIsRefused: a Location with user:password is
// not followed, so the credentials are never sent as Authorization: Basic;
// the call fails like a redirect that is not followed.
func TestRedirectWithCredentialsIsRefused(t *testing.T) {
	t.Parallel()
	target := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		answer(w, http.StatusOK, "ok")
	})
	first := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		http.Redirect(w, r, "http://user:secret-pw@127.0.0.1:"+target.port()+"/ok", http.StatusFound)
	})
	logger, warns := testLogger(t)
	q, ro := newQueue(t, redistest.Mini(t).Addr(), logger)
	metrics := newFakeMetrics()
	startDispatcher(t, q, ro, Options{Allow: allowLoopback, Metrics: metrics}, logger)
	mustPush(t, q, delayqueue.Job{ID: "j", Body: "body", MaxAttempts: 1,
		Callback: &delayqueue.Callback{URL: first.url("/start"), FollowRedirects: true}})

	var info *delayqueue.JobInfo
	waitFor(t, 10*time.Second, "the call's outcome", func() bool {
		info = mustGet(t, q, "j")
		return info == nil || info.State == delayqueue.StateDead
	})
	if info == nil {
		t.Fatalf("the job was finished: the redirect was followed, target got %+v", target.allCalls())
	}
	want := "redirect refused: its target URL carries credentials (302 Found to http://127.0.0.1:" + target.port() + "/ok)"
	if info.DeadReason != delayqueue.ReasonCallbackFailed || info.LastStatus != http.StatusFound || info.LastError != want {
		t.Errorf("got %s, want status 302 and error %q", describe(info), want)
	}
	if calls := target.allCalls(); len(calls) != 0 {
		t.Errorf("the redirect target got %d calls, want none (first: Authorization %q)", len(calls), calls[0].Header.Get("Authorization"))
	}
	waitFor(t, time.Second, "the metrics observation", func() bool { return metrics.total() == 1 })
	if metrics.count(Result3xx) != 1 {
		t.Errorf("metrics = %v, want one %s", metrics.results, Result3xx)
	}
	waitFor(t, time.Second, "one warn line", func() bool { return warns.count("callback failed") == 1 })
}
