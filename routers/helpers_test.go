package routers

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
)

// queueCall records one call the handler made to the fake queue.
type queueCall struct {
	op      string
	job     delayqueue.Job
	jobs    []delayqueue.Job
	topics  []string
	count   int
	hold    time.Duration
	id      string
	ids     []string
	delay   *time.Duration
	attempt int
	topic   string
	offset  int
	limit   int
}

// fakeQueue implements Queue, records calls and answers what it is told.
type fakeQueue struct {
	mu    sync.Mutex
	calls []queueCall

	err         error                     // returned by every method when set
	opErr       map[string]error          // by op name ("get", "touch"…): overrides err
	pushResult  delayqueue.PushResult     // returned by Push
	pushResults []delayqueue.PushResult   // returned by PushBatch, also with an error; nil: created for each job
	delivery    *delayqueue.Delivery      // returned by Pop
	deliveries  []*delayqueue.Delivery    // returned by PopBatch
	info        *delayqueue.JobInfo       // returned by Get
	dead        []string                  // dead-lettered in FinishBatch's statuses
	statuses    []delayqueue.RemoveStatus // returned by FinishBatch and DeleteBatch when set
	deleted     int                       // returned by DeleteBatch and DeadDelete
	loops       []delayqueue.LoopStatus   // returned by LoopHealth
	state       string                    // returned by Release, also with an error
	due         time.Time                 // returned by Release
	leaseUntil  time.Time                 // returned by Touch
	deadJobs    []delayqueue.JobInfo      // returned by DeadList
	deadTotal   int                       // returned by DeadList
	kicked      []string                  // returned by DeadKick
	stats       map[string]delayqueue.TopicStats
	topicNames  []string // returned by Topics
	panicMsg    string   // every method panics with it when set

	// popStarted, when set, receives the context of every Pop, which then
	// waits for that context to end and returns its error.
	popStarted chan context.Context
	// popHolds makes Pop wait out its hold, then answer no job.
	popHolds bool
}

func (f *fakeQueue) record(c queueCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, c)
	if f.panicMsg != "" {
		panic(f.panicMsg)
	}
}

// errOf is the error the fake returns for op.
func (f *fakeQueue) errOf(op string) error {
	if err, ok := f.opErr[op]; ok {
		return err
	}
	return f.err
}

func (f *fakeQueue) recorded() []queueCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]queueCall(nil), f.calls...)
}

func (f *fakeQueue) Push(ctx context.Context, job delayqueue.Job) (delayqueue.PushResult, error) {
	f.record(queueCall{op: "push", job: job})
	return f.pushResult, f.errOf("push")
}

func (f *fakeQueue) PushBatch(ctx context.Context, jobs []delayqueue.Job) ([]delayqueue.PushResult, error) {
	f.record(queueCall{op: "pushBatch", jobs: jobs})
	if err := f.errOf("pushBatch"); err != nil && f.pushResults == nil {
		return nil, err
	}
	if f.pushResults != nil {
		// With an error too: a batch done in part (ErrPartial).
		return f.pushResults, f.errOf("pushBatch")
	}
	return make([]delayqueue.PushResult, len(jobs)), nil
}

func (f *fakeQueue) Pop(ctx context.Context, topics []string, hold time.Duration) (*delayqueue.Delivery, error) {
	f.record(queueCall{op: "pop", topics: topics, hold: hold})
	if f.popStarted != nil {
		f.popStarted <- ctx
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if f.popHolds {
		select {
		case <-time.After(hold):
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.delivery, f.errOf("pop")
}

func (f *fakeQueue) PopBatch(ctx context.Context, topics []string, count int, hold time.Duration) ([]*delayqueue.Delivery, error) {
	f.record(queueCall{op: "popBatch", topics: topics, count: count, hold: hold})
	return f.deliveries, f.errOf("popBatch")
}

func (f *fakeQueue) Finish(ctx context.Context, id string) error {
	f.record(queueCall{op: "finish", id: id})
	return f.errOf("finish")
}

func (f *fakeQueue) FinishDelivery(ctx context.Context, id string, attempt int) (string, error) {
	f.record(queueCall{op: "finishDelivery", id: id, attempt: attempt})
	return f.state, f.errOf("finishDelivery")
}

func (f *fakeQueue) FinishBatch(ctx context.Context, ids []string) ([]delayqueue.RemoveStatus, error) {
	f.record(queueCall{op: "finishBatch", ids: ids})
	if err := f.errOf("finishBatch"); err != nil && f.statuses == nil {
		return nil, err
	}
	if f.statuses != nil {
		return f.statuses, f.errOf("finishBatch")
	}
	statuses := make([]delayqueue.RemoveStatus, len(ids))
	for i, id := range ids {
		statuses[i] = delayqueue.Removed
		if slices.Contains(f.dead, id) {
			statuses[i] = delayqueue.RemoveDead
		}
	}
	return statuses, nil
}

func (f *fakeQueue) Delete(ctx context.Context, id string) error {
	f.record(queueCall{op: "delete", id: id})
	return f.errOf("delete")
}

func (f *fakeQueue) DeleteBatch(ctx context.Context, ids []string) ([]delayqueue.RemoveStatus, error) {
	f.record(queueCall{op: "deleteBatch", ids: ids})
	if err := f.errOf("deleteBatch"); err != nil && f.statuses == nil {
		return nil, err
	}
	if f.statuses != nil {
		return f.statuses, f.errOf("deleteBatch")
	}
	statuses := make([]delayqueue.RemoveStatus, len(ids))
	for i := range ids {
		if i < f.deleted {
			statuses[i] = delayqueue.Removed
		}
	}
	return statuses, nil
}

func (f *fakeQueue) Get(ctx context.Context, id string) (*delayqueue.JobInfo, error) {
	f.record(queueCall{op: "get", id: id})
	return f.info, f.errOf("get")
}

func (f *fakeQueue) Release(ctx context.Context, id string, delay *time.Duration, attempt int) (string, time.Time, error) {
	f.record(queueCall{op: "release", id: id, delay: delay, attempt: attempt})
	return f.state, f.due, f.errOf("release")
}

func (f *fakeQueue) Touch(ctx context.Context, id string, attempt int) (string, time.Time, error) {
	f.record(queueCall{op: "touch", id: id, attempt: attempt})
	return f.state, f.leaseUntil, f.errOf("touch")
}

func (f *fakeQueue) DeadList(ctx context.Context, topic string, offset, limit int) ([]delayqueue.JobInfo, int, error) {
	f.record(queueCall{op: "deadList", topic: topic, offset: offset, limit: limit})
	return f.deadJobs, f.deadTotal, f.errOf("deadList")
}

func (f *fakeQueue) DeadKick(ctx context.Context, topic, id string, count int) ([]string, error) {
	f.record(queueCall{op: "deadKick", topic: topic, id: id, count: count})
	return f.kicked, f.errOf("deadKick")
}

func (f *fakeQueue) DeadDelete(ctx context.Context, topic, id string) (int, error) {
	f.record(queueCall{op: "deadDelete", topic: topic, id: id})
	return f.deleted, f.errOf("deadDelete")
}

func (f *fakeQueue) Stats(ctx context.Context, topic string) (map[string]delayqueue.TopicStats, error) {
	f.record(queueCall{op: "stats", topic: topic})
	return f.stats, f.errOf("stats")
}

func (f *fakeQueue) Topics(ctx context.Context) ([]string, error) {
	f.record(queueCall{op: "topics"})
	return f.topicNames, f.errOf("topics")
}

func (f *fakeQueue) Upcoming(ctx context.Context, step time.Duration, n int) (time.Time, []int64, error) {
	f.record(queueCall{op: "upcoming", count: n, hold: step})
	return time.UnixMilli(1_700_000_000_123), make([]int64, n), f.errOf("upcoming")
}

func (f *fakeQueue) Ready(ctx context.Context) error {
	f.record(queueCall{op: "ready"})
	return f.errOf("ready")
}

func (f *fakeQueue) LoopHealth() []delayqueue.LoopStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loops
}

// testOptions returns small limits that tests can reach.
func testOptions() Options {
	return Options{MaxBodyBytes: 4096, MaxJobBodyBytes: 64, BlockTimeout: 30 * time.Second}
}

// response is a decoded answer.
type response struct {
	status int
	header http.Header
	raw    string
	code   int
	msg    string
	data   json.RawMessage
}

// serve sends one request to h and checks that the answer is a well-formed
// envelope, whatever the case.
func serve(t testing.TB, h http.Handler, method, path, body string, headers ...string) response {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	resp, err := parseEnvelope(rec.Code, rec.Header(), rec.Body.Bytes())
	if err != "" {
		t.Fatalf("%s %s %q: %s", method, path, body, err)
	}
	return resp
}

// parseEnvelope checks an answer: JSON content type, an object with exactly
// code (0 or 1), message (a non-empty string) and data, code 0 only with
// status 200, and a status from the API's table. It returns a description of
// the first problem, or "".
func parseEnvelope(status int, header http.Header, body []byte) (response, string) {
	resp := response{status: status, header: header, raw: string(body)}
	if ct := header.Get("Content-Type"); ct != "application/json; charset=utf-8" {
		return resp, "Content-Type is " + ct
	}
	switch status {
	case http.StatusOK, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusRequestTimeout, http.StatusRequestEntityTooLarge, http.StatusServiceUnavailable:
	default:
		return resp, "unexpected status " + http.StatusText(status)
	}
	var members map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&members); err != nil {
		return resp, "body is not a JSON object: " + err.Error() + ": " + string(body)
	}
	if dec.More() {
		return resp, "data after the envelope: " + string(body)
	}
	if len(members) != 3 {
		return resp, "envelope does not have exactly code, message, data: " + string(body)
	}
	if err := json.Unmarshal(members["code"], &resp.code); err != nil || (resp.code != 0 && resp.code != 1) {
		return resp, "code is not 0 or 1: " + string(body)
	}
	if err := json.Unmarshal(members["message"], &resp.msg); err != nil || resp.msg == "" {
		return resp, "message is not a non-empty string: " + string(body)
	}
	data, ok := members["data"]
	if !ok {
		return resp, "no data member: " + string(body)
	}
	resp.data = data
	if resp.code == 0 && status != http.StatusOK {
		return resp, "code 0 with a status other than 200: " + string(body)
	}
	return resp, ""
}
