package routers

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// validBodies returns a valid request body for every endpoint.
func validBodies() map[string]string {
	return map[string]string{
		"/push":        `{"topic":"t","id":"1","delay":0,"ttr":5,"body":"b"}`,
		"/pop":         `{"topic":"t","timeout":0}`,
		"/finish":      `{"id":"1"}`,
		"/delete":      `{"id":"1"}`,
		"/get":         `{"id":"1"}`,
		"/release":     `{"id":"1","delay":5,"attempt":1}`,
		"/touch":       `{"id":"1","attempt":1}`,
		"/dead/list":   `{"topic":"t"}`,
		"/dead/kick":   `{"topic":"t","count":5}`,
		"/dead/delete": `{"topic":"t","all":true}`,
		"/stats":       `{}`,
		"/topics":      ``,
	}
}

// validRequest is one valid request: validBodies and the other forms of
// the endpoints that have several (batches, a single dead letter).
type validRequest struct{ path, body string }

func validRequests() []validRequest {
	var requests []validRequest
	for path, body := range validBodies() {
		requests = append(requests, validRequest{path, body})
	}
	return append(requests,
		validRequest{"/push", `{"jobs":[{"topic":"t","id":"1","ttr":5},{"topic":"t","id":"2","ttr":5,"retry":[1],"if_absent":true}]}`},
		validRequest{"/pop", `{"topic":"t","timeout":0,"count":10}`},
		validRequest{"/finish", `{"ids":["1","2"]}`},
		validRequest{"/delete", `{"ids":["1","2"]}`},
		validRequest{"/dead/kick", `{"topic":"t","id":"1"}`},
		validRequest{"/dead/delete", `{"topic":"t","id":"1"}`},
		validRequest{"/stats", `{"topic":"t"}`},
	)
}

func TestStatusCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		method     string
		path       string
		body       string
		headers    []string
		wantStatus int
		wantCode   int
		wantMsg    string
	}{
		{"success", "POST", "/push", validBodies()["/push"], nil, 200, 0, "pushed"},
		{"invalid input", "POST", "/push", `{"topic":"t"}`, nil, 200, 1, "id is required and must not be blank"},
		{"GET", "GET", "/push", "", nil, 405, 1, "method GET is not allowed on /push: use POST with a JSON body"},
		{"PUT", "PUT", "/pop", validBodies()["/pop"], nil, 405, 1, "method PUT is not allowed on /pop: use POST with a JSON body"},
		{"DELETE", "DELETE", "/delete", validBodies()["/delete"], nil, 405, 1, "method DELETE is not allowed on /delete: use POST with a JSON body"},
		{"OPTIONS", "OPTIONS", "/get", "", nil, 405, 1, "method OPTIONS is not allowed on /get: use POST with a JSON body"},
		{"PATCH", "PATCH", "/finish", "", nil, 405, 1, "method PATCH is not allowed on /finish: use POST with a JSON body"},
		{"lower-case method", "post", "/push", validBodies()["/push"], nil, 405, 1, "method post is not allowed on /push: use POST with a JSON body"},
		{"CONNECT", "CONNECT", "/push", "", nil, 405, 1, "method CONNECT is not allowed on /push: use POST with a JSON body"},
		{"root", "POST", "/", "{}", nil, 404, 1, `unknown path "/": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"unknown", "POST", "/add", "{}", nil, 404, 1, `unknown path "/add": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"unknown GET", "GET", "/favicon.ico", "", nil, 404, 1, `unknown path "/favicon.ico": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"trailing slash", "POST", "/push/", "{}", nil, 404, 1, `unknown path "/push/": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"sub-path", "POST", "/push/x", "{}", nil, 404, 1, `unknown path "/push/x": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"upper case", "POST", "/PUSH", "{}", nil, 404, 1, `unknown path "/PUSH": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"double slash", "POST", "//push", "{}", nil, 404, 1, `unknown path "//push": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"dot segment", "POST", "/./push", "{}", nil, 404, 1, `unknown path "/./push": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"dot-dot segment", "POST", "/x/../push", "{}", nil, 404, 1, `unknown path "/x/../push": the endpoints are /push, /pop, /finish, /delete, /get, /release, /touch, /dead/list, /dead/kick, /dead/delete, /stats, /topics and /upcoming`},
		{"query string is fine", "POST", "/push?x=1", validBodies()["/push"], nil, 200, 0, "pushed"},
		{"same origin", "POST", "http://localhost/push", validBodies()["/push"], []string{"Origin", "http://localhost"}, 200, 0, "pushed"},
		{"same origin with port", "POST", "http://127.0.0.1:9277/push", validBodies()["/push"], []string{"Origin", "http://127.0.0.1:9277"}, 200, 0, "pushed"},
		{"same origin, host case differs", "POST", "http://LocalHost/push", validBodies()["/push"], []string{"Origin", "http://localhost"}, 200, 0, "pushed"},
		{"same origin, default https port", "POST", "http://localhost:443/push", validBodies()["/push"], []string{"Origin", "https://localhost"}, 200, 0, "pushed"},
		{"other origin", "POST", "/push", validBodies()["/push"], []string{"Origin", "http://evil.test"}, 403, 1,
			`cross-origin request refused: Origin "http://evil.test" does not match host "example.com"`},
		{"other port", "POST", "http://127.0.0.1:9277/delete", validBodies()["/delete"], []string{"Origin", "http://127.0.0.1:8080"}, 403, 1,
			`cross-origin request refused: Origin "http://127.0.0.1:8080" does not match host "127.0.0.1:9277"`},
		{"null origin", "POST", "/push", validBodies()["/push"], []string{"Origin", "null"}, 403, 1,
			`cross-origin request refused: Origin "null" does not match host "example.com"`},
		{"garbage origin", "POST", "/push", validBodies()["/push"], []string{"Origin", "::"}, 403, 1,
			`cross-origin request refused: Origin "::" does not match host "example.com"`},
		{"other origin on an unknown path", "GET", "/x", "", []string{"Origin", "http://evil.test"}, 403, 1,
			`cross-origin request refused: Origin "http://evil.test" does not match host "example.com"`},
		{"body over max_body_bytes", "POST", "/push", `{"body":"` + strings.Repeat("x", 5000) + `"}`, nil, 413, 1,
			"request body is larger than max_body_bytes (4096 bytes)"},
		{"body at max_body_bytes", "POST", "/pop", `{"topic":"t","pad":"` + strings.Repeat("x", 4096-len(`{"topic":"t","pad":""}`)) + `"}`, nil, 200, 0, "no job ready"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), tc.method, tc.path, tc.body, tc.headers...)
			if resp.status != tc.wantStatus || resp.code != tc.wantCode || resp.msg != tc.wantMsg {
				t.Fatalf("answer %d %s\nwant %d code %d %q", resp.status, resp.raw, tc.wantStatus, tc.wantCode, tc.wantMsg)
			}
			if string(resp.data) != "null" && tc.wantCode == 1 {
				t.Errorf("failure with data %s", resp.data)
			}
			if tc.wantStatus == http.StatusMethodNotAllowed {
				if allow := resp.header.Get("Allow"); allow != "POST" {
					t.Errorf("Allow = %q, want POST", allow)
				}
			}
			if tc.wantCode == 1 {
				if calls := q.recorded(); len(calls) != 0 {
					t.Errorf("queue called: %+v", calls)
				}
			}
		})
	}
}

// Over a real connection too: a chunked body with no Content-Length, HEAD,
// and a request line the client library would never produce.
func TestStatusCodesOverTheWire(t *testing.T) {
	forEachFront(t, func(t *testing.T, f front) {
		q := &fakeQueue{}
		url := f.serve(t, q, testOptions(), redistest.Logger(t))

		t.Run("chunked body over the limit", func(t *testing.T) {
			body := io.MultiReader(strings.NewReader(`{"topic":"`), strings.NewReader(strings.Repeat("x", 10000)), strings.NewReader(`"}`))
			req, err := http.NewRequest("POST", url+"/pop", body) // a plain reader: sent chunked
			if err != nil {
				t.Fatal(err)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			got, problem := parseEnvelope(resp.StatusCode, resp.Header, raw)
			if problem != "" || got.status != 413 || got.code != 1 {
				t.Fatalf("answer %d %s %s", resp.StatusCode, raw, problem)
			}
		})
		t.Run("HEAD", func(t *testing.T) {
			resp, err := http.Head(url + "/push")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" || resp.Header.Get("Content-Type") != "application/json; charset=utf-8" {
				t.Fatalf("HEAD answer %d %v", resp.StatusCode, resp.Header)
			}
		})
		t.Run("unclean path sent raw", func(t *testing.T) {
			req, err := http.NewRequest("POST", url, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			req.URL.Opaque = "//push" // sent verbatim, not cleaned by the client
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			got, problem := parseEnvelope(resp.StatusCode, resp.Header, raw)
			if problem != "" || got.status != 404 {
				t.Fatalf("answer %d %s %s", resp.StatusCode, raw, problem)
			}
		})
		if calls := q.recorded(); len(calls) != 0 {
			t.Errorf("queue called: %+v", calls)
		}
	})
}

// Engine errors: the sentinels reach the client as clear messages, the
// rest as "internal error" without detail. All are 200 with code 1.
func TestQueueErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		err     error
		wantMsg string
	}{
		{"redis unavailable", fmt.Errorf("push: %w: dial tcp 127.0.0.1:6379: connection refused", delayqueue.ErrUnavailable), "redis unavailable, try again"},
		{"invalid job", fmt.Errorf("push x: %w: topic too long", delayqueue.ErrInvalidJob), "push x: invalid job: topic too long"},
		{"shutting down", delayqueue.ErrClosed, "server is shutting down, try again"},
		{"starting", fmt.Errorf("get x: %w", delayqueue.ErrStarting), "server is starting (moving jobs to the current layout), try again"},
		{"anything else", errors.New("ERR Error running script (call to f_123): secret detail"), "internal error"},
		{"context canceled while the client is still there", context.Canceled, "internal error"},
		{"not found", fmt.Errorf("release x: %w", delayqueue.ErrNotFound), "job not found"},
		{"dead", fmt.Errorf("finish x: %w", delayqueue.ErrDead), "job is dead-lettered"},
		{"not reserved", fmt.Errorf("touch x: %w (it is ready)", delayqueue.ErrNotReserved), "job is not reserved"},
		{"stale delivery", fmt.Errorf("touch x: %w", delayqueue.ErrStaleDelivery), "stale delivery: attempt 1 is not the job's current delivery"},
		{"too many held pops", fmt.Errorf("pop: %w: this server already holds 20000 pops", delayqueue.ErrTooManyWaiters),
			"too many held pops on this server (max_held_pops = 20000), try again or another server"},
		{"not replicated", fmt.Errorf("push: %w: 0 of 1 replicas acknowledged within 1s", delayqueue.ErrNotReplicated),
			"not confirmed by enough redis replicas (wait_replicas), try again"},
		{"not replicated and unavailable", fmt.Errorf("%w: %w", delayqueue.ErrUnavailable, delayqueue.ErrNotReplicated),
			"not confirmed by enough redis replicas (wait_replicas), try again"},
		{"redis out of memory", fmt.Errorf("push x: %w: OOM command not allowed when used memory > 'maxmemory'.", delayqueue.ErrRedisFull),
			"redis is out of memory (maxmemory), try again later"},
	}
	for _, req := range validRequests() {
		for _, tc := range tests {
			t.Run(req.path+" "+req.body+"/"+tc.name, func(t *testing.T) {
				q := &fakeQueue{err: tc.err}
				resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", req.path, req.body)
				wantMsg := tc.wantMsg
				if errors.Is(tc.err, delayqueue.ErrStaleDelivery) && req.path != "/release" && req.path != "/touch" {
					// Only those two carry an attempt.
					wantMsg = "stale delivery: the attempt is not the job's current delivery"
				}
				if resp.status != 200 || resp.code != 1 || resp.msg != wantMsg || string(resp.data) != "null" {
					t.Fatalf("answer %d %s, want 200 code 1 %q", resp.status, resp.raw, wantMsg)
				}
				if calls := q.recorded(); len(calls) != 1 {
					t.Fatalf("calls = %+v, want 1", calls)
				}
			})
		}
	}
}

func TestPanicIsAnswered(t *testing.T) {
	forEachFront(t, func(t *testing.T, f front) {
		var logs lockedBuffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		q := &fakeQueue{panicMsg: "boom"}
		url := f.serve(t, q, testOptions(), logger)

		for _, req := range validRequests() {
			got, problem := tryPost(url, req.path, req.body)
			if problem != "" || got.status != 200 || got.code != 1 || got.msg != "internal error" {
				t.Fatalf("%s %s: answer %d %s %s", req.path, req.body, got.status, got.raw, problem)
			}
			f.checkVia(t, got, req.path, len(req.body), testOptions())
		}
		// Both servers log a request before its answer is sent.
		if n := strings.Count(logs.String(), `msg="panic in http handler"`); n != len(validRequests()) {
			t.Errorf("%d panic log lines, want %d:\n%s", n, len(validRequests()), logs.String())
		}
		if !strings.Contains(logs.String(), "panic=boom") {
			t.Errorf("the panic value is not logged:\n%s", logs.String())
		}
	})
}

// One line per request, with the job's topic and id, and never its body.
func TestRequestLog(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	q := &fakeQueue{delivery: &delayqueue.Delivery{ID: "job-9", Topic: "mail", Body: "secret-delivered", TTR: 5e9, Attempts: 1}}
	h := New(q, testOptions(), logger)

	serve(t, h, "POST", "/push", `{"topic":"mail","id":"job-1","ttr":5,"body":"secret-pushed"}`)
	serve(t, h, "POST", "/pop", `{"topic":"mail,news"}`)
	serve(t, h, "POST", "/push", `{"topic":"mail","ttr":5}`)

	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d log lines, want 3:\n%s", len(lines), logs.String())
	}
	wants := []string{
		`"level":"INFO","msg":"http request","method":"POST","path":"/push","status":200,"code":0,`,
		`"level":"INFO","msg":"http request","method":"POST","path":"/pop","status":200,"code":0,`,
		`"level":"INFO","msg":"http request","method":"POST","path":"/push","status":200,"code":1,`,
	}
	for i, want := range wants {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %d: %s\nwant it to contain %s", i, lines[i], want)
		}
	}
	for i, want := range []string{`"topic":"mail","job_id":"job-1"`, `"topic":"mail","job_id":"job-9"`} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], `"duration":`) {
			t.Errorf("line %d: %s\nwant it to contain %s and a duration", i, lines[i], want)
		}
	}
	if strings.Contains(logs.String(), "secret") {
		t.Errorf("a job body was logged:\n%s", logs.String())
	}
}

func TestOptionsDefaults(t *testing.T) {
	t.Parallel()
	got := Options{}.withDefaults()
	want := Options{MaxBodyBytes: defaults.MaxBodyBytes, MaxJobBodyBytes: defaults.MaxJobBodyBytes,
		BlockTimeout: defaults.QueueBlockTimeout, MaxHeldPops: defaults.MaxHeldPops, ReadyTimeout: 2 * time.Second}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	kept := Options{MaxBodyBytes: 1, MaxJobBodyBytes: 2, BlockTimeout: 3, MaxHeldPops: 4, ReadyTimeout: 5}
	if got := kept.withDefaults(); !reflect.DeepEqual(got, kept) {
		t.Fatalf("withDefaults changed %+v to %+v", kept, got)
	}
}

// Every endpoint answers POST, refuses other methods with 405 and is named
// in the answer to an unknown path.
func TestEveryEndpointIsRouted(t *testing.T) {
	t.Parallel()
	h := New(&fakeQueue{}, testOptions(), redistest.Logger(t))
	unknown := serve(t, h, "POST", "/nope", "{}")
	for path, body := range validBodies() {
		if resp := serve(t, h, "POST", path, body); resp.status != 200 || resp.code != 0 {
			t.Errorf("POST %s %s: %d %s", path, body, resp.status, resp.raw)
		}
		if resp := serve(t, h, "GET", path, ""); resp.status != 405 || resp.header.Get("Allow") != "POST" {
			t.Errorf("GET %s: %d %s", path, resp.status, resp.raw)
		}
		if !strings.Contains(unknown.msg+",", " "+path+",") && !strings.Contains(unknown.msg+",", " "+path+" and") {
			t.Errorf("the 404 message does not name %s: %s", path, unknown.msg)
		}
	}
}
