package routers

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// sendWithHost sends a request to url with the given Host header (the
// connection goes to url's address whatever the Host says) and returns the
// answer, checked to be an envelope, and the server that ran it.
func sendWithHost(t *testing.T, method, url, host, contentType, body string, headers ...string) (response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	// A connection per request: once a connection has gone to net/http (a
	// /stats does), it stays there.
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s (Host %s): %v", method, url, host, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read the answer: %v", method, url, err)
	}
	got, problem := parseEnvelope(resp.StatusCode, resp.Header, raw)
	if problem != "" {
		t.Fatalf("%s %s (Host %s): %s", method, url, host, problem)
	}
	return got, resp.Header.Get(servedByHeader)
}

// DNS rebinding: a page on a name its author controls, later pointed at the
// server, sends that name as Host and the matching Origin, which the
// cross-origin check lets through. Requests from a browser (Origin or
// Sec-Fetch-Site) are answered only under an IP literal, localhost or a
// name in allowed_hosts; other clients keep working under any name. Each
// case runs on /push (the fast path where it serves) and on /stats, the
// body a text/plain one that a page may send without a preflight.
func TestBrowserRequestsNeedAKnownHost(t *testing.T) {
	q := &fakeQueue{}
	opts := testOptions()
	opts.AllowedHosts = []string{"dq.example", "Upper.Example."}

	tests := []struct {
		name    string
		host    string
		headers []string
		refused bool
	}{
		{"rebinding page, Origin of its own name", "rebind.example:9277", []string{"Origin", "http://rebind.example:9277"}, true},
		{"rebinding page, Sec-Fetch-Site only", "rebind.example:9277", []string{"Sec-Fetch-Site", "same-origin"}, true},
		{"rebinding page on the default port", "rebind.example", []string{"Origin", "http://rebind.example"}, true},
		{"trailing dot", "rebind.example.:9277", []string{"Origin", "http://rebind.example.:9277"}, true},
		{"a name that starts with localhost", "localhost.rebind.example", []string{"Origin", "http://localhost.rebind.example"}, true},
		{"localhost as a prefix", "localhostx:9277", []string{"Sec-Fetch-Site", "same-origin"}, true},
		{"a name under an allowed one", "evil.dq.example:9277", []string{"Origin", "http://evil.dq.example:9277"}, true},
		{"an allowed name as a prefix", "dq.example.rebind.example", []string{"Sec-Fetch-Site", "same-origin"}, true},
		{"an IPv4 address in brackets", "[127.0.0.1]:9277", []string{"Sec-Fetch-Site", "same-origin"}, true},

		{"IPv4 literal", "127.0.0.1:9277", []string{"Origin", "http://127.0.0.1:9277"}, false},
		{"IPv6 literal", "[::1]:9277", []string{"Origin", "http://[::1]:9277"}, false},
		{"IP literal without a port", "10.1.2.3", []string{"Sec-Fetch-Site", "same-origin"}, false},
		{"localhost", "localhost:9277", []string{"Origin", "http://localhost:9277", "Sec-Fetch-Site", "same-origin"}, false},
		{"localhost in upper case, with a trailing dot", "LOCALHOST.:9277", []string{"Sec-Fetch-Site", "same-origin"}, false},
		{"a name under .localhost", "dash.localhost:9277", []string{"Origin", "http://dash.localhost:9277"}, false},
		{"a name in allowed_hosts", "dq.example:9277", []string{"Origin", "http://dq.example:9277"}, false},
		{"an allowed name in another case, with a trailing dot", "DQ.Example.:9277", []string{"Sec-Fetch-Site", "same-origin"}, false},
		{"an entry written in upper case with a dot", "upper.example", []string{"Origin", "http://upper.example"}, false},

		{"not a browser: the rebinding name", "rebind.example:9277", nil, false},
		{"not a browser: any name", "queue.internal.corp", nil, false},
	}
	forEachFront(t, func(t *testing.T, f front) {
		url := f.serve(t, q, opts, redistest.Logger(t))
		for _, tc := range tests {
			for _, endpoint := range []string{"/push", "/stats"} {
				t.Run(tc.name+endpoint, func(t *testing.T) {
					before := len(q.recorded())
					body := validBodies()[endpoint]
					got, via := sendWithHost(t, http.MethodPost, url+endpoint, tc.host, "text/plain", body, tc.headers...)
					if wantVia := f.via(endpoint, len(body), opts); via != wantVia {
						t.Errorf("served by %q, want %q", via, wantVia)
					}
					calls := len(q.recorded()) - before
					if !tc.refused {
						if got.status != http.StatusOK || got.code != 0 || calls != 1 {
							t.Fatalf("answer %d %s after %d queue calls, want it served", got.status, got.raw, calls)
						}
						return
					}
					wantMsg := fmt.Sprintf(msgForeignHost, tc.host)
					if got.status != http.StatusForbidden || got.code != 1 || got.msg != wantMsg {
						t.Fatalf("answer %d %s\nwant 403, code 1, %q", got.status, got.raw, wantMsg)
					}
					if !strings.Contains(got.msg, "allowed_hosts") {
						t.Errorf("message %q does not name allowed_hosts", got.msg)
					}
					if calls != 0 {
						t.Errorf("a refused request reached the queue %d times", calls)
					}
				})
			}
		}
	})
}

// With auth_token set, the token decides: a browser request under any name
// is served with it, and without it gets 401, so that the dashboard asks
// for the token rather than reporting a refusal it cannot act on.
func TestBrowserRequestsWithTheTokenPassUnderAnyHost(t *testing.T) {
	const token = "0123456789abcdef-token"
	q := &fakeQueue{}
	opts := testOptions()
	opts.AuthToken = token
	const host = "rebind.example:9277"
	browser := []string{"Origin", "http://" + host, "Sec-Fetch-Site", "same-origin"}

	tests := []struct {
		name       string
		auth       string
		wantStatus int
		wantMsg    string
	}{
		{"valid token", "Bearer " + token, http.StatusOK, "pushed"},
		{"no token", "", http.StatusUnauthorized, msgTokenMissing},
		{"wrong token", "Bearer not-the-token-at-all", http.StatusUnauthorized, msgTokenInvalid},
	}
	forEachFront(t, func(t *testing.T, f front) {
		url := f.serve(t, q, opts, redistest.Logger(t))
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				headers := browser
				if tc.auth != "" {
					headers = append(headers[:len(headers):len(headers)], "Authorization", tc.auth)
				}
				body := validBodies()["/push"]
				got, via := sendWithHost(t, http.MethodPost, url+"/push", host, "text/plain", body, headers...)
				if wantVia := f.via("/push", len(body), opts); via != wantVia {
					t.Errorf("served by %q, want %q", via, wantVia)
				}
				if got.status != tc.wantStatus || got.msg != tc.wantMsg {
					t.Fatalf("answer %d %s, want %d %q", got.status, got.raw, tc.wantStatus, tc.wantMsg)
				}
			})
		}
	})
}

// The GET routes that never need the token answer browsers under any name:
// the dashboard's page must load before it can ask for the token, and what
// keeps /metrics from a rebinding page is metrics_auth, since the page's
// own GETs carry no Origin.
func TestOpenRoutesAnswerBrowsersUnderAnyHost(t *testing.T) {
	opts := testOptions()
	opts.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "dq_up 1\n")
	})
	opts.UI = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "<!doctype html>")
	})
	forEachFront(t, func(t *testing.T, f front) {
		url := f.serve(t, &fakeQueue{}, opts, redistest.Logger(t))
		for _, path := range []string{"/healthz", "/metrics", "/ui/"} {
			req, err := http.NewRequest(http.MethodGet, url+path, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Host = "rebind.example:9277"
			req.Header.Set("Sec-Fetch-Site", "same-origin")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET %s from a browser under a foreign name: %d %s, want 200", path, resp.StatusCode, raw)
			}
		}
	})
}
