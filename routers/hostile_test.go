package routers

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// hostileOptions are the default limits (max_body_bytes 16 MiB,
// max_job_body_bytes 1 MiB).
func hostileOptions() Options { return Options{BlockTimeout: 5 * time.Second} }

// hostileServer runs the real engine on miniredis behind the real handler
// with hostileOptions, on the front f.
func hostileServer(t *testing.T, f front) string {
	t.Helper()
	mini := redistest.Mini(t)
	q := enginetest.Start(t, mini.Addr(), 5*time.Second, redistest.Logger(t))
	// A discarding logger: t.Log of 10 MB request lines is not useful.
	return f.serve(t, q, hostileOptions(), nil)
}

// postBytes sends one raw body and checks the envelope.
func postBytes(t *testing.T, url, path string, body []byte) response {
	t.Helper()
	resp, err := clientFor(path, len(body)).Post(url+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read the answer: %v", path, err)
	}
	got, problem := parseEnvelope(resp.StatusCode, resp.Header, raw)
	if problem != "" {
		t.Fatalf("POST %s (%d bytes): %s", path, len(body), problem)
	}
	return got
}

// Hostile inputs against the real engine: each gets a clear code 1 answer
// (or 413), and the state is the same afterwards: a job pushed before is
// still there and poppable, and /stats has not moved.
func TestHostileInputs(t *testing.T) {
	const (
		tenMB  = 10 << 20
		id100k = 100 << 10
	)
	bigID := strings.Repeat("i", id100k)
	bigIDMsg := fmt.Sprintf("id must be at most %d bytes, got %d", delayqueue.MaxIDBytes, id100k)
	tooManyIDs := `{"ids":[` + strings.TrimSuffix(strings.Repeat(`"x",`, delayqueue.MaxIDsPerCall+1), ",") + `]}`
	tests := []struct {
		name       string
		path       string
		body       []byte
		wantStatus int
		wantMsg    string // a substring of the message
	}{
		// Huge numbers.
		{"huge delay", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"delay":99999999999999999999999999}`), 200,
			"delay must be an integer between 0 and 2147483647 (seconds), got 99999999999999999999999999"},
		{"delay just over the limit", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"delay":2147483648}`), 200,
			"delay must be an integer between 0 and 2147483647"},
		{"huge ttr", "/push", []byte(`{"topic":"h","id":"h1","ttr":1` + strings.Repeat("0", 5000) + `}`), 200,
			"ttr must be an integer between 1 and 86400 (seconds), got 1000000000"},
		{"exponent", "/push", []byte(`{"topic":"h","id":"h1","ttr":1e400}`), 200, "ttr must be an integer between 1 and 86400"},
		{"huge pop count", "/pop", []byte(`{"topic":"h","count":18446744073709551616}`), 200, "count must be an integer between 1 and 100"},
		{"huge pop timeout", "/pop", []byte(`{"topic":"h","timeout":9223372036854775807}`), 200, "timeout must be an integer between 0 and 5"},
		{"huge dead list offset", "/dead/list", []byte(`{"topic":"h","offset":99999999999999999999}`), 200, "offset must be an integer"},
		{"huge attempt", "/touch", []byte(`{"id":"keep","attempt":99999999999999999999}`), 200, "attempt must be an integer"},
		{"huge retry list", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"retry":[` +
			strings.TrimSuffix(strings.Repeat("1,", delayqueue.MaxRetryEntries+1), ",") + `]}`), 200, "retry must hold 0 to 100"},
		// Floats.
		{"float delay", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"delay":1.5}`), 200, "delay must be an integer between 0 and 2147483647 (seconds), got 1.5"},
		{"float ttr written as integer", "/push", []byte(`{"topic":"h","id":"h1","ttr":5.0}`), 200, "ttr must be an integer"},
		{"float timeout", "/pop", []byte(`{"topic":"h","timeout":0.5}`), 200, "timeout must be an integer"},
		{"NaN", "/push", []byte(`{"topic":"h","id":"h1","ttr":NaN}`), 200, "request body is not valid JSON"},
		// Negatives.
		{"negative delay", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"delay":-1}`), 200, "got -1"},
		{"negative ttr", "/push", []byte(`{"topic":"h","id":"h1","ttr":-5}`), 200, "ttr must be an integer between 1 and 86400 (seconds), got -5"},
		{"negative delay_ms", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"delay_ms":-1000}`), 200, "delay_ms must be an integer"},
		{"negative timeout", "/pop", []byte(`{"topic":"h","timeout":-1}`), 200, "timeout must be an integer between 0 and 5"},
		{"negative count", "/pop", []byte(`{"topic":"h","count":-3}`), 200, "count must be an integer between 1 and 100"},
		{"negative max_attempts", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"max_attempts":-1}`), 200, "max_attempts must be an integer"},
		{"negative release delay", "/release", []byte(`{"id":"keep","delay":-9}`), 200, "delay must be an integer"},
		{"negative kick count", "/dead/kick", []byte(`{"topic":"safe","count":-1}`), 200, "count must be an integer"},
		// Nested objects and wrong types.
		{"object as topic", "/push", []byte(`{"topic":{"a":{"b":[1,{"c":{}}]}},"id":"h1","ttr":5}`), 200, "topic must be a string, got an object"},
		{"array as id", "/get", []byte(`{"id":["keep"]}`), 200, "id must be a string, got an array"},
		{"number as id", "/finish", []byte(`{"id":12}`), 200, "id must be a string, got a number"},
		{"object as body", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"body":{"x":1}}`), 200, "body must be a string, got an object"},
		{"string as delay", "/push", []byte(`{"topic":"h","id":"h1","ttr":"5"}`), 200, "ttr must be an integer"},
		{"objects in ids", "/delete", []byte(`{"ids":[{"id":"keep"}]}`), 200, "ids[0] must be a string, got an object"},
		{"array as body", "/push", []byte(`[{"topic":"h","id":"h1","ttr":5}]`), 200, "request body must be a JSON object, got an array"},
		{"deeply nested", "/push", []byte(`{"topic":` + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + `}`), 200,
			"request body is not valid JSON"},
		{"two objects", "/delete", []byte(`{"id":"keep"}{"id":"keep"}`), 200, "request body has data after the JSON object"},
		// Invalid UTF-8 and unpaired surrogates.
		{"invalid UTF-8 topic", "/push", []byte("{\"topic\":\"\xff\xfe\",\"id\":\"h1\",\"ttr\":5}"), 200, "topic must be valid UTF-8"},
		{"invalid UTF-8 id", "/delete", []byte("{\"id\":\"kee\xc3\"}"), 200, "id must be valid UTF-8"},
		{"invalid UTF-8 body", "/push", []byte("{\"topic\":\"h\",\"id\":\"h1\",\"ttr\":5,\"body\":\"\xed\xa0\x80\"}"), 200, "body must be valid UTF-8"},
		{"unpaired surrogate", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"body":"\udc00"}`), 200, "unpaired surrogate"},
		{"invalid UTF-8 in an ignored member", "/get", []byte("{\"x\":\"\xff\"}"), 200, "id is required"},
		{"control character in topic", "/push", []byte(`{"topic":"a\u0000b","id":"h1","ttr":5}`), 200, "topic must not contain control characters"},
		// Big bodies.
		{"10 MB job body", "/push", []byte(`{"topic":"h","id":"h1","ttr":5,"body":"` + strings.Repeat("b", tenMB) + `"}`), 200,
			fmt.Sprintf("body must be at most %d bytes (max_job_body_bytes), got %d bytes", defaults.MaxJobBodyBytes, tenMB)},
		{"10 MB of garbage", "/push", bytes.Repeat([]byte("\x00garbage"), tenMB/8), 200, "request body is not valid JSON"},
		{"10 MB of spaces", "/get", bytes.Repeat([]byte(" "), tenMB), 200, "request body is empty"},
		{"10 MB unknown member", "/delete", []byte(`{"id":"h1","pad":"` + strings.Repeat("p", tenMB) + `"}`), 200, ""},
		{"body over max_body_bytes", "/push", bytes.Repeat([]byte("x"), defaults.MaxBodyBytes+1), 413,
			"request body is larger than max_body_bytes (16777216 bytes)"},
		// Empty bodies.
		{"empty push", "/push", nil, 200, "request body is empty: send a JSON object"},
		{"empty pop", "/pop", nil, 200, "request body is empty"},
		{"empty finish", "/finish", nil, 200, "request body is empty"},
		{"empty get", "/get", nil, 200, "request body is empty"},
		{"empty release", "/release", []byte("  \n"), 200, "request body is empty"},
		{"empty object", "/push", []byte(`{}`), 200, "topic is required"},
		{"null", "/pop", []byte(`null`), 200, "request body must be a JSON object, got null"},
		// Empty topic lists.
		{"comma topic list", "/pop", []byte(`{"topic":","}`), 200, "topic 1 of 2 is required and must not be blank"},
		{"commas and spaces", "/pop", []byte(`{"topic":" , ,, "}`), 200, "topic 1 of 4 is required and must not be blank"},
		{"trailing comma", "/pop", []byte(`{"topic":"safe,"}`), 200, "topic 2 of 2 is required and must not be blank"},
		{"comma topic on push", "/push", []byte(`{"topic":",","id":"h1","ttr":5}`), 200, "topic must not contain a comma"},
		{"comma topic on stats", "/stats", []byte(`{"topic":","}`), 200, "topic must not contain a comma"},
		{"too many topics", "/pop", []byte(`{"topic":"` + strings.Repeat("a,", delayqueue.MaxPopTopics) + `a"}`), 200, "at most 100 are allowed"},
		// Ids of 100 kB.
		{"100 kB id on push", "/push", []byte(`{"topic":"h","id":"` + bigID + `","ttr":5}`), 200, bigIDMsg},
		{"100 kB id on get", "/get", []byte(`{"id":"` + bigID + `"}`), 200, bigIDMsg},
		{"100 kB id on finish", "/finish", []byte(`{"id":"` + bigID + `"}`), 200, bigIDMsg},
		{"100 kB id on delete", "/delete", []byte(`{"id":"` + bigID + `"}`), 200, bigIDMsg},
		{"100 kB id on release", "/release", []byte(`{"id":"` + bigID + `"}`), 200, bigIDMsg},
		{"100 kB id on touch", "/touch", []byte(`{"id":"` + bigID + `"}`), 200, bigIDMsg},
		{"100 kB id in ids", "/finish", []byte(`{"ids":["keep","` + bigID + `"]}`), 200,
			fmt.Sprintf("ids[1] must be at most %d bytes, got %d", delayqueue.MaxIDBytes, id100k)},
		{"100 kB id on dead kick", "/dead/kick", []byte(`{"topic":"safe","id":"` + bigID + `"}`), 200, bigIDMsg},
		{"100 kB topic", "/pop", []byte(`{"topic":"` + strings.Repeat("t", id100k) + `"}`), 200,
			fmt.Sprintf("topic must be at most %d bytes, got %d", delayqueue.MaxTopicBytes, id100k)},
		{"too many ids", "/delete", []byte(tooManyIDs), 200, "ids must hold 1 to 1000 ids, got 1001"},
	}

	forEachFront(t, func(t *testing.T, f front) {
		url := hostileServer(t, f)
		mustSucceed(t, url, "/push", `{"topic":"safe","id":"keep","ttr":30,"body":"kept"}`)
		statsBefore := mustSucceed(t, url, "/stats", `{}`).data
		getBefore := mustSucceed(t, url, "/get", `{"id":"keep"}`).data

		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				got := postBytes(t, url, tt.path, tt.body)
				f.checkVia(t, got, tt.path, len(tt.body), hostileOptions())
				if tt.name == "10 MB unknown member" {
					// Unknown members are ignored, as in the original; the
					// request is otherwise valid and deletes nothing that
					// exists.
					if got.code != 0 {
						t.Fatalf("answer %d %.300s", got.status, got.raw)
					}
					return
				}
				if got.status != tt.wantStatus || got.code != 1 || !strings.Contains(got.msg, tt.wantMsg) {
					t.Fatalf("answer %d %.500s\nwant %d code 1 with %q", got.status, got.raw, tt.wantStatus, tt.wantMsg)
				}
				if len(got.raw) > 2000 {
					t.Errorf("the answer is %d bytes: it echoes the input", len(got.raw))
				}
				if stats := mustSucceed(t, url, "/stats", `{}`).data; !bytes.Equal(stats, statsBefore) {
					t.Fatalf("/stats changed:\nbefore %s\nafter  %s", statsBefore, stats)
				}
				if job := mustSucceed(t, url, "/get", `{"id":"keep"}`).data; !bytes.Equal(job, getBefore) {
					t.Fatalf("/get keep changed:\nbefore %s\nafter  %s", getBefore, job)
				}
			})
		}

		// The job pushed first is still poppable, with its body intact.
		popped := mustSucceed(t, url, "/pop", `{"topic":"safe","timeout":1}`)
		if !strings.Contains(string(popped.data), `"id":"keep"`) || !strings.Contains(string(popped.data), `"body":"kept"`) {
			t.Fatalf("pop after the hostile inputs: %s", popped.raw)
		}
	})
}
