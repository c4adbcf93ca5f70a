package webhook

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// jobHeaders are a callback's own headers, as a user would set them.
var jobHeaders = map[string]string{
	"Authorization": "Bearer job-token",
	"X-Api-Key":     "job-key",
	"User-Agent":    "shop/1.0",
	"Content-Type":  "application/json",
}

// TestRedirectsKeepTheJobsHeadersWithTheirHost follows redirects between
// two receivers, on two ports of 127.0.0.1, and checks what the last one
// was sent: the job's headers and the signature only while the chain stays
// on the first receiver, and the signature only with the body it signs.
func TestRedirectsKeepTheJobsHeadersWithTheirHost(t *testing.T) {
	t.Parallel()
	const (
		secret = "s3cret"
		body   = `{"out_trade_no":"42"}`
	)
	cases := []struct {
		name       string
		start      string // path on the first receiver
		lastOnNext bool   // the final call reaches the other receiver, else the first
		stripped   bool   // the final call carries no job header, signature or Referer
		method     string // of the final call; a body is sent with POST only
	}{
		{name: "307 to the same host keeps everything", start: "/307-self", method: http.MethodPost},
		{name: "302 to the same host becomes a GET with the headers, not the signature of the body it drops", start: "/302-self", method: http.MethodGet},
		{name: "307 to another port carries the body, not the headers", start: "/307-other", lastOnNext: true, stripped: true, method: http.MethodPost},
		{name: "308 to another port carries the body, not the headers", start: "/308-other", lastOnNext: true, stripped: true, method: http.MethodPost},
		{name: "302 to another port becomes a GET without the headers", start: "/302-other", lastOnNext: true, stripped: true, method: http.MethodGet},
		{name: "back to the first host after another one stays stripped", start: "/307-via-other", stripped: true, method: http.MethodPost},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			final := func(w http.ResponseWriter, r *http.Request) bool {
				if r.URL.Path != "/final" {
					return false
				}
				answer(w, http.StatusNoContent, "")
				return true
			}
			var first *receiver
			next := newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				if !final(w, r) {
					http.Redirect(w, r, first.url("/final"), http.StatusTemporaryRedirect)
				}
			})
			first = newReceiver(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				switch r.URL.Path {
				case "/307-self":
					http.Redirect(w, r, "/final", http.StatusTemporaryRedirect)
				case "/302-self":
					http.Redirect(w, r, "/final", http.StatusFound)
				case "/307-other":
					http.Redirect(w, r, next.url("/final"), http.StatusTemporaryRedirect)
				case "/308-other":
					http.Redirect(w, r, next.url("/final"), http.StatusPermanentRedirect)
				case "/302-other":
					http.Redirect(w, r, next.url("/final"), http.StatusFound)
				case "/307-via-other":
					http.Redirect(w, r, next.url("/back"), http.StatusTemporaryRedirect)
				default:
					final(w, r)
				}
			})
			logger, _ := testLogger(t)
			q, ro := newQueue(t, redistest.Mini(t).Addr(), logger)
			startDispatcher(t, q, ro, Options{Secret: secret, Allow: allowLoopback}, logger)
			mustPush(t, q, delayqueue.Job{ID: "j", Topic: "pay", Body: body, MaxAttempts: 1,
				Callback: &delayqueue.Callback{URL: first.url(tc.start + "?token=url-token"), FollowRedirects: true, Headers: jobHeaders}})
			redistest.WaitFor(t, 10*time.Second, "the job to be finished", func() bool { return mustGet(t, q, "j") == nil })

			last := first
			if tc.lastOnNext {
				last = next
			}
			var got *received
			for _, c := range last.callsFor("j") {
				if c.Path == "/final" {
					got = &c
				}
			}
			if got == nil {
				t.Fatalf("no call reached /final on the %s receiver", map[bool]string{true: "other", false: "first"}[tc.lastOnNext])
			}
			if got.ID != "j" || got.Topic != "pay" || got.Attempt != "1" || got.Timestamp == "" {
				t.Errorf("delivery headers: id=%q topic=%q attempt=%q timestamp=%q, want them all", got.ID, got.Topic, got.Attempt, got.Timestamp)
			}
			if got.Method != tc.method {
				t.Errorf("method %s, want %s", got.Method, tc.method)
			}
			if wantBody := map[bool]string{true: body, false: ""}[tc.method == http.MethodPost]; got.Body != wantBody {
				t.Errorf("body %q, want %q", got.Body, wantBody)
			}
			if !tc.stripped {
				for name, value := range jobHeaders {
					if name == "Content-Type" && tc.method != http.MethodPost {
						continue // the client drops it with the body
					}
					if got.Header.Get(name) != value {
						t.Errorf("%s = %q, want the job's %q", name, got.Header.Get(name), value)
					}
				}
				want := Sign(secret, got.Timestamp, []byte(body))
				if tc.method != http.MethodPost {
					want = ""
				}
				if got.Signature != want {
					t.Errorf("signature %q, want %q", got.Signature, want)
				}
				return
			}
			for name := range jobHeaders {
				if name != "User-Agent" && got.Header.Get(name) != "" {
					t.Errorf("%s = %q reached another host", name, got.Header.Get(name))
				}
			}
			if ua := got.Header.Get("User-Agent"); ua != userAgent {
				t.Errorf("User-Agent = %q, want the server's own %q", ua, userAgent)
			}
			if got.Signature != "" {
				t.Errorf("signature %q reached another host", got.Signature)
			}
			if ref := got.Header.Get("Referer"); ref != "" {
				t.Errorf("Referer %q reached another host", ref)
			}
		})
	}
}

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
	redistest.WaitFor(t, 10*time.Second, "the call's outcome", func() bool {
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
	redistest.WaitFor(t, time.Second, "the metrics observation", func() bool { return metrics.total() == 1 })
	if metrics.count(Result3xx) != 1 {
		t.Errorf("metrics = %v, want one %s", metrics.results, Result3xx)
	}
	redistest.WaitFor(t, time.Second, "one warn line", func() bool { return warns.count("callback failed") == 1 })
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	cases := []struct {
		from, to string
		same     bool
	}{
		{"http://hooks.example/a", "http://hooks.example/b?x=1", true},
		{"http://hooks.example/a", "http://HOOKS.example:80/b", true},
		{"https://hooks.example/a", "https://hooks.example:443/b", true},
		{"http://127.0.0.1:8080/a", "http://127.0.0.1:8080/b", true},
		{"http://[::1]:8080/a", "http://[::1]:8080/b", true},
		// The upgrade to https on the default ports is the same receiver.
		{"http://hooks.example/a", "https://hooks.example/a", true},
		{"http://hooks.example:80/a", "https://hooks.example:443/a", true},
		// Anything else is another one.
		{"http://hooks.example/a", "http://other.example/a", false},
		{"http://hooks.example/a", "http://sub.hooks.example/a", false},
		{"http://127.0.0.1:8080/a", "http://127.0.0.1:8081/a", false},
		{"http://127.0.0.1:8080/a", "http://127.0.0.2:8080/a", false},
		{"http://hooks.example/a", "http://hooks.example:8080/a", false},
		{"https://hooks.example/a", "http://hooks.example/a", false},
		{"http://hooks.example:8080/a", "https://hooks.example:8080/a", false},
		{"http://hooks.example:8080/a", "https://hooks.example/a", false},
		{"http://hooks.example/a", "https://hooks.example:8443/a", false},
	}
	for _, tc := range cases {
		from, err := url.Parse(tc.from)
		if err != nil {
			t.Fatal(err)
		}
		to, err := url.Parse(tc.to)
		if err != nil {
			t.Fatal(err)
		}
		if got := sameOrigin(from, to); got != tc.same {
			t.Errorf("sameOrigin(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.same)
		}
	}
}
