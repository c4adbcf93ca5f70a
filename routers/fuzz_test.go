package routers

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/delay-queue/delay-queue/delayqueue"
)

// fuzzPaths are the paths FuzzRequest's endpoint byte picks from: the five
// endpoints and one unknown path.
func fuzzPaths() []string {
	return []string{"/push", "/pop", "/finish", "/delete", "/get", "/nope"}
}

// FuzzRequest sends arbitrary bodies to every endpoint. Whatever the input:
// no panic, a well-formed envelope with code 0 or 1 and a status from the
// API's table, and a queue call only with values that pass validation.
func FuzzRequest(f *testing.F) {
	seeds := []string{
		`{"topic":"t","id":"1","delay":0,"ttr":5,"body":"b"}`,
		`{"topic":" a , b ","timeout":3}`,
		`{"id":"15"}`,
		`{"topic":"t","id":"1","delay_ms":1500,"ttr":86400,"body":"\ud83d\ude00"}`,
		`{"topic":"t\ud800","id":"1","ttr":1}`,
		"{\"topic\":\"\xff\",\"id\":\"1\",\"ttr\":1}",
		`{"delay":10.5}`, `{"delay":1e3}`, `[1]`, `null`, `{}{}`, `{} x`, ``, `{"ID":"x","id":null}`,
	}
	for i, seed := range seeds {
		for endpoint := range len(fuzzPaths()) {
			f.Add(uint8(endpoint+i*len(fuzzPaths())), []byte(seed))
		}
	}
	opts := Options{MaxBodyBytes: 512, MaxJobBodyBytes: 32, BlockTimeout: 10 * time.Second}

	f.Fuzz(func(t *testing.T, endpoint uint8, body []byte) {
		path := fuzzPaths()[int(endpoint)%len(fuzzPaths())]
		q := &fakeQueue{
			delivery: &delayqueue.Delivery{ID: "1", Topic: "t", Body: "b", TTR: time.Second, Attempts: 1},
			info:     &delayqueue.JobInfo{ID: "1", Topic: "t", Body: "b", TTR: time.Second, State: delayqueue.StateReady},
		}
		rec := httptest.NewRecorder()
		New(q, opts, slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest("POST", path, bytes.NewReader(body)))

		resp, problem := parseEnvelope(rec.Code, rec.Header(), rec.Body.Bytes())
		if problem != "" {
			t.Fatalf("%s %q: %s", path, body, problem)
		}
		wantStatus := 200
		switch {
		case path == "/nope":
			wantStatus = 404
		case int64(len(body)) > opts.MaxBodyBytes:
			wantStatus = 413
		}
		if resp.status != wantStatus {
			t.Fatalf("%s %q: status %d, want %d", path, body, resp.status, wantStatus)
		}

		calls := q.recorded()
		if resp.code == 1 {
			if len(calls) != 0 {
				t.Fatalf("%s %q: failed after calling the queue: %+v", path, body, calls)
			}
			return
		}
		// Accepted: the body was one JSON object, and the queue got clean values.
		if !json.Valid(body) || bytes.TrimLeft(body, " \t\r\n")[0] != '{' {
			t.Fatalf("%s %q: accepted a body that is not one JSON object", path, body)
		}
		if len(calls) != 1 {
			t.Fatalf("%s %q: calls %+v, want one", path, body, calls)
		}
		call := calls[0]
		switch call.op {
		case "push":
			checkCleanTopic(t, call.job.Topic)
			checkCleanID(t, call.job.ID)
			if !utf8.ValidString(call.job.Body) || len(call.job.Body) > opts.MaxJobBodyBytes {
				t.Fatalf("pushed body %q", call.job.Body)
			}
			if call.job.Delay < 0 || call.job.Delay > delayqueue.MaxDelay || call.job.TTR < time.Second || call.job.TTR > delayqueue.MaxTTR {
				t.Fatalf("pushed delay %v ttr %v", call.job.Delay, call.job.TTR)
			}
		case "pop":
			if len(call.topics) == 0 || len(call.topics) > delayqueue.MaxPopTopics {
				t.Fatalf("popped %d topics", len(call.topics))
			}
			for _, topic := range call.topics {
				checkCleanTopic(t, topic)
			}
			if call.hold < 0 || call.hold > opts.BlockTimeout {
				t.Fatalf("pop hold %v", call.hold)
			}
		default:
			checkCleanID(t, call.id)
		}
	})
}

func checkCleanTopic(t *testing.T, topic string) {
	t.Helper()
	if topic == "" || len(topic) > delayqueue.MaxTopicBytes || !utf8.ValidString(topic) ||
		strings.TrimSpace(topic) != topic || strings.Contains(topic, ",") ||
		strings.ContainsFunc(topic, unicode.IsControl) {
		t.Fatalf("queue got topic %q", topic)
	}
}

func checkCleanID(t *testing.T, id string) {
	t.Helper()
	if id == "" || len(id) > delayqueue.MaxIDBytes || !utf8.ValidString(id) || strings.TrimSpace(id) != id {
		t.Fatalf("queue got id %q", id)
	}
}
