package routers

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/http1"
)

// fuzzPaths are the paths FuzzRequest's endpoint byte picks from: every
// endpoint and one unknown path.
func fuzzPaths() []string {
	return []string{"/push", "/pop", "/finish", "/delete", "/get", "/release", "/touch",
		"/dead/list", "/dead/kick", "/dead/delete", "/stats", "/topics", "/nope"}
}

// FuzzRequest sends arbitrary bodies to every endpoint, over the wire,
// through both fronts (see front). Whatever the input: no panic, a
// well-formed envelope with code 0 or 1 and a status from the API's table,
// a queue call only with values that pass validation, and the same answer
// from both fronts, run by the server each should run it.
func FuzzRequest(f *testing.F) {
	seeds := []string{
		`{"topic":"t","id":"1","delay":0,"ttr":5,"body":"b"}`,
		`{"topic":" a , b ","timeout":3}`,
		`{"id":"15"}`,
		`{"topic":"t","id":"1","delay_ms":1500,"ttr":86400,"body":"\ud83d\ude00"}`,
		`{"topic":"t\ud800","id":"1","ttr":1}`,
		"{\"topic\":\"\xff\",\"id\":\"1\",\"ttr\":1}",
		`{"delay":10.5}`, `{"delay":1e3}`, `[1]`, `null`, `{}{}`, `{} x`, ``, `{"ID":"x","id":null}`,
		`{"topic":"t","id":"1","ttr":5,"retry":[1,2,3],"max_attempts":4,"if_absent":true}`,
		`{"jobs":[{"topic":"t","id":"1","ttr":5},{"topic":"t","id":"2","ttr":1,"retry":[0]}]}`,
		`{"jobs":[{"topic":"t","id":"1","ttr":5},{"topic":"t","id":" 1","ttr":1}]}`,
		`{"jobs":[{"topic":"t","id":"1","ttr":5}],"topic":"t"}`,
		`{"topic":"a,b","count":3,"timeout":1}`,
		`{"ids":["a","b","a"]}`, `{"id":"a","ids":["a"]}`, `{"ids":[]}`,
		`{"id":"1","delay":5,"attempt":2}`, `{"id":"1","attempt":0}`,
		`{"topic":"t","offset":3,"limit":10}`, `{"topic":"t","id":"x","count":2}`, `{"topic":"t","count":1000}`,
		`{"topic":"t","all":true}`, `{"topic":"t","all":false}`, `{"topic":"t","id":"x"}`, `{"topic":null}`, `{}`,
		// Over max_body_bytes (512 here): net/http's on both fronts.
		`{"topic":"t","id":"1","ttr":5,"body":"` + strings.Repeat("b", 600) + `"}`,
	}
	// The Authorization header: mostly the right token, so that bodies get
	// decoded, and a few near misses, one of which no parser takes.
	const token = "fuzz-token-0123456789"
	auths := []string{"Bearer " + token, "Bearer " + token, "Bearer " + token, "",
		"Bearer " + token + "x", "bearer  " + token + " ", "Basic " + token, token, "Bearer \x00" + token}
	for i, seed := range seeds {
		for endpoint := range len(fuzzPaths()) {
			f.Add(uint8(endpoint), auths[(i+endpoint)%len(auths)], []byte(seed))
		}
	}
	opts := Options{MaxBodyBytes: 512, MaxJobBodyBytes: 32, BlockTimeout: 10 * time.Second, AuthToken: token}

	// The fronts are started once and run the handler of the input being
	// tried (the inputs are tried one at a time), with a queue of its own.
	var current atomic.Pointer[http.Handler]
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*current.Load()).ServeHTTP(w, r) })
	urls := make([]string, len(fronts()))
	for i, fr := range fronts() {
		urls[i] = fr.serveHandler(f, handler, opts)
	}

	f.Fuzz(func(t *testing.T, endpoint uint8, auth string, body []byte) {
		path := fuzzPaths()[int(endpoint)%len(fuzzPaths())]
		// A header line cannot hold a line break.
		auth = strings.Map(func(r rune) rune {
			if r == '\r' || r == '\n' {
				return -1
			}
			return r
		}, auth)
		answers := make([]wireAnswer, len(fronts()))
		for i, fr := range fronts() {
			q := fuzzQueue()
			h := New(q, opts, slog.New(slog.DiscardHandler))
			current.Store(&h)
			answers[i] = sendRaw(t, urls[i], path, auth, body)
			checkFuzzAnswer(t, fr, opts, path, auth, token, body, answers[i], q.recorded())
		}
		for i := 1; i < len(answers); i++ {
			if problem := answers[0].differsFrom(answers[i]); problem != "" {
				t.Fatalf("%s %.200q (Authorization %q): %s and %s answer apart: %s", path, body, auth,
					fronts()[0].name, fronts()[i].name, problem)
			}
		}
	})
}

// fuzzQueue is a fake queue with an answer for every call.
func fuzzQueue() *fakeQueue {
	delivery := &delayqueue.Delivery{ID: "1", Topic: "t", Body: "b", TTR: time.Second, Attempts: 1}
	info := &delayqueue.JobInfo{ID: "1", Topic: "t", Body: "b", TTR: time.Second, State: delayqueue.StateReady}
	return &fakeQueue{
		delivery:   delivery,
		deliveries: []*delayqueue.Delivery{delivery},
		info:       info,
		state:      delayqueue.StateDelay,
		due:        time.UnixMilli(1_700_000_000_000),
		leaseUntil: time.UnixMilli(1_700_000_000_000),
		deadJobs:   []delayqueue.JobInfo{*info},
		deadTotal:  1,
		kicked:     []string{"1"},
		stats:      map[string]delayqueue.TopicStats{"t": {Ready: 1}},
		topicNames: []string{"t"},
	}
}

// wireAnswer is an answer as it came over the wire. (http.ReadResponse
// takes Connection and Transfer-Encoding out of the headers.)
type wireAnswer struct {
	status int
	header http.Header
	body   []byte
	// close is Connection: close; chunked, Transfer-Encoding: chunked.
	close, chunked bool
	// headBytes is the length of the request's head as it was sent.
	headBytes int
}

// differsFrom says how two fronts' answers differ, or "" when they do not:
// status, headers (but Date and the name of the server that ran it), the
// connection's fate, framing and body.
func (a wireAnswer) differsFrom(b wireAnswer) string {
	if a.status != b.status {
		return fmt.Sprintf("status %d and %d", a.status, b.status)
	}
	if a.close != b.close {
		return fmt.Sprintf("Connection: close %v and %v", a.close, b.close)
	}
	if a.chunked != b.chunked {
		return fmt.Sprintf("chunked %v and %v", a.chunked, b.chunked)
	}
	if !bytes.Equal(a.body, b.body) {
		return fmt.Sprintf("body %q and %q", a.body, b.body)
	}
	comparable := func(h http.Header) http.Header {
		h = h.Clone()
		h.Del("Date")
		h.Del(servedByHeader)
		return h
	}
	if ha, hb := comparable(a.header), comparable(b.header); !reflect.DeepEqual(ha, hb) {
		return fmt.Sprintf("headers %v and %v", ha, hb)
	}
	return ""
}

// sendRaw sends one POST to the server at url, written by hand so that any
// header value goes as it is, and reads the answer.
func sendRaw(t *testing.T, url, path, auth string, body []byte) wireAnswer {
	t.Helper()
	addr := strings.TrimPrefix(url, "http://")
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	head := "POST " + path + " HTTP/1.1\r\nHost: " + addr + "\r\n"
	if auth != "" {
		head += "Authorization: " + auth + "\r\n"
	}
	head += "Content-Length: " + strconv.Itoa(len(body)) + "\r\n\r\n"
	// Written while the answer is read: a server may answer before it has
	// read the whole body (413), and a large one would fill the socket.
	headBytes := len(head)
	go func() { _, _ = c.Write(append([]byte(head), body...)) }()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("POST %s %q (Authorization %q): no answer: %v", path, body, auth, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s %q: read the answer: %v", path, body, err)
	}
	return wireAnswer{status: resp.StatusCode, header: resp.Header, body: raw, close: resp.Close,
		chunked: slices.Contains(resp.TransferEncoding, "chunked"), headBytes: headBytes}
}

// validFieldValue reports whether a header value is one HTTP parsers take:
// no control characters but tabs.
func validFieldValue(v string) bool {
	for i := range len(v) {
		if v[i] < ' ' && v[i] != '\t' || v[i] == 0x7f {
			return false
		}
	}
	return true
}

// checkFuzzAnswer checks one front's answer to a fuzzed request and the
// queue calls it made.
func checkFuzzAnswer(t *testing.T, fr front, opts Options, path, auth, token string, body []byte, answer wireAnswer, calls []queueCall) {
	t.Helper()
	via := answer.header.Get(servedByHeader)
	if !validFieldValue(auth) {
		// No parser takes the head: net/http answers 400 itself.
		if answer.status != http.StatusBadRequest || via != "" || len(calls) != 0 {
			t.Fatalf("%s: Authorization %q: answer %d %q run by %q after %d queue calls, want net/http's 400",
				fr.name, auth, answer.status, answer.body, via, len(calls))
		}
		return
	}
	want := fr.via(path, len(body), opts)
	if answer.headBytes > http1.MaxHeadBytes {
		want = viaNetHTTP // a head the fast path cannot hold is net/http's
	}
	if via != want {
		t.Fatalf("%s: %s with %d bytes run by %q, want %q", fr.name, path, len(body), via, want)
	}
	resp, problem := parseEnvelope(answer.status, answer.header, answer.body)
	if problem != "" {
		t.Fatalf("%s: %s %q: %s", fr.name, path, body, problem)
	}
	wantStatus := 200
	switch {
	case path == "/nope":
		wantStatus = 404
	case resp.status == 401:
		// Refused: only a header without the exact token may be.
		if strings.TrimSpace(auth) == "Bearer "+token {
			t.Fatalf("%s: the right token (header %q) was refused", path, auth)
		}
		wantStatus = 401
	case !strings.Contains(auth, token):
		t.Fatalf("%s: header %q without the token was accepted: %s", path, auth, resp.raw)
	case int64(len(body)) > opts.MaxBodyBytes:
		wantStatus = 413
	}
	if resp.status != wantStatus {
		t.Fatalf("%s %q: status %d, want %d", path, body, resp.status, wantStatus)
	}

	if resp.code == 1 {
		if len(calls) != 0 {
			t.Fatalf("%s %q: failed after calling the queue: %+v", path, body, calls)
		}
		return
	}
	// Accepted: the body was one JSON object (or, for /topics and /stats,
	// which need no field, blank), and the queue got clean values.
	blank := len(bytes.TrimSpace(body)) == 0
	if !((path == "/topics" || path == "/stats") && blank) && (!json.Valid(body) || blank || bytes.TrimSpace(body)[0] != '{') {
		t.Fatalf("%s %q: accepted a body that is not one JSON object", path, body)
	}
	if len(calls) != 1 {
		t.Fatalf("%s %q: calls %+v, want one", path, body, calls)
	}
	call := calls[0]
	switch call.op {
	case "push":
		checkCleanJob(t, call.job, opts.MaxJobBodyBytes)
	case "pushBatch":
		if len(call.jobs) == 0 || len(call.jobs) > delayqueue.MaxPushBatchJobs {
			t.Fatalf("pushed a batch of %d jobs", len(call.jobs))
		}
		ids := make(map[string]bool, len(call.jobs))
		for _, job := range call.jobs {
			checkCleanJob(t, job, opts.MaxJobBodyBytes)
			if ids[job.ID] {
				t.Fatalf("pushed id %q twice in a batch", job.ID)
			}
			ids[job.ID] = true
		}
	case "pop", "popBatch":
		if len(call.topics) == 0 || len(call.topics) > delayqueue.MaxPopTopics {
			t.Fatalf("popped %d topics", len(call.topics))
		}
		for _, topic := range call.topics {
			checkCleanTopic(t, topic)
		}
		if call.hold < 0 || call.hold > opts.BlockTimeout {
			t.Fatalf("pop hold %v", call.hold)
		}
		if (call.op == "pop") != (call.count == 0) || call.count < 0 || call.count > delayqueue.MaxPopCount {
			t.Fatalf("%s count %d", call.op, call.count)
		}
	case "finishBatch", "deleteBatch":
		if len(call.ids) == 0 || len(call.ids) > delayqueue.MaxIDsPerCall {
			t.Fatalf("%s of %d ids", call.op, len(call.ids))
		}
		seen := make(map[string]bool, len(call.ids))
		for _, id := range call.ids {
			checkCleanID(t, id)
			if seen[id] {
				t.Fatalf("%s got id %q twice", call.op, id)
			}
			seen[id] = true
		}
	case "release", "touch":
		checkCleanID(t, call.id)
		if call.attempt < 0 || (call.delay != nil && (*call.delay < 0 || *call.delay > delayqueue.MaxDelay)) ||
			(call.op == "touch" && call.delay != nil) {
			t.Fatalf("%s attempt %d delay %v", call.op, call.attempt, call.delay)
		}
	case "deadList":
		checkCleanTopic(t, call.topic)
		if call.offset < 0 || call.limit < 1 || call.limit > delayqueue.MaxDeadPage {
			t.Fatalf("dead list offset %d limit %d", call.offset, call.limit)
		}
	case "deadKick":
		checkCleanTopic(t, call.topic)
		if call.id != "" {
			checkCleanID(t, call.id)
		}
		if (call.id == "") == (call.count == 0) || call.count < 0 || call.count > delayqueue.MaxDeadPage {
			t.Fatalf("dead kick id %q count %d", call.id, call.count)
		}
	case "deadDelete":
		checkCleanTopic(t, call.topic)
		if call.id != "" {
			checkCleanID(t, call.id)
		}
	case "stats":
		if call.topic != "" {
			checkCleanTopic(t, call.topic)
		}
	case "topics":
	default:
		checkCleanID(t, call.id)
	}
}

// checkCleanJob checks a job the handler pushed: clean topic and id, and
// within the engine's own validation.
func checkCleanJob(t *testing.T, job delayqueue.Job, maxJobBodyBytes int) {
	t.Helper()
	checkCleanTopic(t, job.Topic)
	checkCleanID(t, job.ID)
	if !utf8.ValidString(job.Body) || len(job.Body) > maxJobBodyBytes {
		t.Fatalf("pushed body %q", job.Body)
	}
	if err := delayqueue.ValidateJob(job); err != nil {
		t.Fatalf("pushed %+v, which the engine refuses: %v", job, err)
	}
	if job.Retry != nil && len(job.Retry) == 0 {
		t.Fatalf("pushed an empty, non-nil schedule")
	}
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
