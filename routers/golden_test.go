package routers

import (
	"bytes"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// updateGolden rewrites the golden answers from what the handler writes:
// go test ./routers/ -run TestAnswersGolden -update. Only for a deliberate
// change of the API; the diff of testdata/answers is the change on the wire.
var updateGolden = flag.Bool("update", false, "rewrite the golden answers in testdata/answers")

// Representative times: a millisecond part, so that seconds and
// milliseconds differ, and distinct values, so that a swap shows.
var (
	goldenCreated = time.UnixMilli(1_700_000_000_123)
	goldenDue     = time.UnixMilli(1_700_000_060_456)
	goldenLease   = time.UnixMilli(1_700_000_090_789)
	goldenDeadAt  = time.UnixMilli(1_700_000_120_999)
)

// goldenInfo is a stored job with every common field set.
func goldenInfo(state string) *delayqueue.JobInfo {
	return &delayqueue.JobInfo{ID: "j1", Topic: "mail", Body: "hello", TTR: 30 * time.Second, DueAt: goldenDue,
		State: state, Attempts: 2, CreatedAt: goldenCreated, Retry: []int{10, 60}, MaxAttempts: 5}
}

// goldenCallbackInfo is a webhook job whose last call failed.
func goldenCallbackInfo() *delayqueue.JobInfo {
	info := goldenInfo(delayqueue.StateDead)
	info.Retry, info.MaxAttempts = nil, 0
	info.DeadReason, info.DeadAt = delayqueue.ReasonCallbackFailed, goldenDeadAt
	info.Callback = &delayqueue.Callback{URL: "https://example.com/hook", Method: "PUT",
		Headers: map[string]string{"X-B": "2", "X-A": "1"}, TimeoutSeconds: 20, FollowRedirects: true}
	info.LastStatus, info.LastError, info.LastResponse = 502, "HTTP 502", "<html>bad gateway</html>"
	return info
}

// goldenCase is one answer of the API, produced by the handler from a
// fake engine's representative values.
type goldenCase struct {
	name   string // the file in testdata/answers, without .golden
	method string // POST when empty
	path   string
	body   string
	queue  *fakeQueue
	status int // 200 when 0
}

func goldenCases() []goldenCase {
	delivery := &delayqueue.Delivery{ID: "j1", Topic: "mail", Body: "hello", TTR: 30 * time.Second, Attempts: 1}
	escaped := &delayqueue.Delivery{ID: "j2", Topic: "mail", Body: "<b>\"é\"\n\u2028&</b>", TTR: 5 * time.Second, Attempts: 3}
	unknownAt := goldenInfo(delayqueue.StateReady)
	unknownAt.CreatedAt, unknownAt.DueAt = time.Time{}, time.Time{} // imported from the original
	unknownAt.Retry, unknownAt.MaxAttempts = nil, 0
	deadJob := *goldenInfo(delayqueue.StateDead)
	deadJob.DeadReason, deadJob.DeadAt = delayqueue.ReasonReleased, goldenDeadAt
	reserved := goldenInfo(delayqueue.StateReserved)
	reserved.LeaseUntil = goldenLease
	const push = `{"topic":"mail","id":"j1","ttr":30}`
	const batch = `{"jobs":[{"topic":"mail","id":"a","ttr":30},{"topic":"mail","id":"b","ttr":30},{"topic":"mail","id":"c","ttr":30}]}`
	return []goldenCase{
		{name: "push", path: "/push", body: push, queue: &fakeQueue{}},
		{name: "push-replaced", path: "/push", body: push, queue: &fakeQueue{pushResult: delayqueue.PushResult{Status: delayqueue.PushReplaced}}},
		{name: "push-if-absent-new", path: "/push", body: `{"topic":"mail","id":"j1","ttr":30,"if_absent":true}`, queue: &fakeQueue{}},
		{name: "push-if-absent-exists", path: "/push", body: `{"topic":"mail","id":"j1","ttr":30,"if_absent":true}`,
			queue: &fakeQueue{pushResult: delayqueue.PushResult{Status: delayqueue.PushExists}}},
		{name: "push-batch", path: "/push", body: batch, queue: &fakeQueue{pushResults: []delayqueue.PushResult{
			{Status: delayqueue.PushCreated}, {Status: delayqueue.PushReplaced}, {Status: delayqueue.PushExists}}}},
		{name: "push-batch-invalid", path: "/push",
			body:  `{"jobs":[{"topic":"mail","id":"a","ttr":30},{"topic":"mail","id":"b"},{"topic":"mail","id":"a","ttr":30}]}`,
			queue: &fakeQueue{}},
		{name: "push-batch-partial", path: "/push", body: batch, queue: &fakeQueue{
			opErr: map[string]error{"pushBatch": delayqueue.ErrPartial},
			pushResults: []delayqueue.PushResult{
				{Status: delayqueue.PushCreated}, {Status: delayqueue.PushFailed}, {Status: delayqueue.PushReplaced}}}},
		{name: "push-batch-partial-full", path: "/push", body: batch, queue: &fakeQueue{
			opErr: map[string]error{"pushBatch": fmt.Errorf("%w: %w", delayqueue.ErrPartial, delayqueue.ErrRedisFull)},
			pushResults: []delayqueue.PushResult{
				{Status: delayqueue.PushCreated}, {Status: delayqueue.PushFailed, Err: delayqueue.ErrRedisFull}, {Status: delayqueue.PushReplaced}}}},
		{name: "push-batch-partial-not-replicated", path: "/push", body: batch, queue: &fakeQueue{
			opErr: map[string]error{"pushBatch": fmt.Errorf("%w: %w", delayqueue.ErrPartial, delayqueue.ErrNotReplicated)},
			pushResults: []delayqueue.PushResult{
				{Status: delayqueue.PushCreated}, {Status: delayqueue.PushFailed, Err: delayqueue.ErrNotReplicated}, {Status: delayqueue.PushReplaced}}}},

		{name: "pop", path: "/pop", body: `{"topic":"mail","timeout":0}`, queue: &fakeQueue{delivery: delivery}},
		{name: "pop-escaped", path: "/pop", body: `{"topic":"mail","timeout":0}`, queue: &fakeQueue{delivery: escaped}},
		{name: "pop-empty", path: "/pop", body: `{"topic":"mail","timeout":0}`, queue: &fakeQueue{}},
		{name: "pop-count", path: "/pop", body: `{"topic":"mail","timeout":0,"count":2}`,
			queue: &fakeQueue{deliveries: []*delayqueue.Delivery{delivery, escaped}}},
		{name: "pop-count-one", path: "/pop", body: `{"topic":"mail","timeout":0,"count":2}`,
			queue: &fakeQueue{deliveries: []*delayqueue.Delivery{delivery}}},
		{name: "pop-count-empty", path: "/pop", body: `{"topic":"mail","timeout":0,"count":2}`, queue: &fakeQueue{}},

		{name: "finish", path: "/finish", body: `{"id":"j1"}`, queue: &fakeQueue{}},
		{name: "finish-ids", path: "/finish", body: `{"ids":["a","b"]}`, queue: &fakeQueue{}},
		{name: "finish-ids-dead", path: "/finish", body: `{"ids":["a","b","c"]}`, queue: &fakeQueue{dead: []string{"b", "c"}}},
		{name: "finish-ids-partial", path: "/finish", body: `{"ids":["a","b","c","d"]}`, queue: &fakeQueue{
			opErr:    map[string]error{"finishBatch": delayqueue.ErrPartial},
			statuses: []delayqueue.RemoveStatus{delayqueue.Removed, delayqueue.RemoveDead, delayqueue.RemoveFailed, delayqueue.RemoveUnknown}}},
		{name: "delete", path: "/delete", body: `{"id":"j1"}`, queue: &fakeQueue{}},
		{name: "delete-ids", path: "/delete", body: `{"ids":["a","b","c"]}`, queue: &fakeQueue{deleted: 2}},
		{name: "delete-ids-partial", path: "/delete", body: `{"ids":["a","b","c"]}`, queue: &fakeQueue{
			opErr:    map[string]error{"deleteBatch": delayqueue.ErrPartial},
			statuses: []delayqueue.RemoveStatus{delayqueue.Removed, delayqueue.RemoveFailed, delayqueue.RemoveUnknown}}},
		{name: "delete-ids-partial-full", path: "/delete", body: `{"ids":["a","b","c"]}`, queue: &fakeQueue{
			opErr:    map[string]error{"deleteBatch": fmt.Errorf("%w: %w", delayqueue.ErrPartial, delayqueue.ErrRedisFull)},
			statuses: []delayqueue.RemoveStatus{delayqueue.Removed, delayqueue.RemoveFailed, delayqueue.RemoveUnknown}}},

		{name: "get-unknown", path: "/get", body: `{"id":"j1"}`, queue: &fakeQueue{}},
		{name: "get-delay", path: "/get", body: `{"id":"j1"}`, queue: &fakeQueue{info: goldenInfo(delayqueue.StateDelay)}},
		{name: "get-times-unknown", path: "/get", body: `{"id":"j1"}`, queue: &fakeQueue{info: unknownAt}},
		{name: "get-reserved", path: "/get", body: `{"id":"j1"}`, queue: &fakeQueue{info: reserved}},
		{name: "get-dead", path: "/get", body: `{"id":"j1"}`, queue: &fakeQueue{info: &deadJob}},
		{name: "get-callback", path: "/get", body: `{"id":"j1"}`, queue: &fakeQueue{info: goldenCallbackInfo()}},

		{name: "release", path: "/release", body: `{"id":"j1"}`, queue: &fakeQueue{state: delayqueue.StateDelay, due: goldenDue}},
		{name: "release-dead", path: "/release", body: `{"id":"j1","attempt":2}`, queue: &fakeQueue{state: delayqueue.StateDead, due: goldenDeadAt}},
		{name: "touch", path: "/touch", body: `{"id":"j1","attempt":2}`, queue: &fakeQueue{state: delayqueue.StateReserved, leaseUntil: goldenLease}},

		{name: "dead-list", path: "/dead/list", body: `{"topic":"mail"}`,
			queue: &fakeQueue{deadJobs: []delayqueue.JobInfo{deadJob, *goldenCallbackInfo()}, deadTotal: 7}},
		{name: "dead-list-empty", path: "/dead/list", body: `{"topic":"mail","offset":10}`, queue: &fakeQueue{deadTotal: 3}},
		{name: "dead-kick", path: "/dead/kick", body: `{"topic":"mail","count":2}`, queue: &fakeQueue{kicked: []string{"a", "b"}}},
		{name: "dead-kick-none", path: "/dead/kick", body: `{"topic":"mail","id":"x"}`, queue: &fakeQueue{}},
		{name: "dead-delete", path: "/dead/delete", body: `{"topic":"mail","all":true}`, queue: &fakeQueue{deleted: 4}},

		{name: "stats", path: "/stats", body: `{}`, queue: &fakeQueue{stats: map[string]delayqueue.TopicStats{
			"mail": {Delay: 1, Ready: 2, Reserved: 3, Dead: 4}, "sms": {}}}},
		{name: "stats-empty", path: "/stats", body: `{"topic":"mail"}`, queue: &fakeQueue{}},
		{name: "topics", path: "/topics", body: `{}`, queue: &fakeQueue{topicNames: []string{"mail", "sms"}}},
		{name: "topics-empty", path: "/topics", body: `{}`, queue: &fakeQueue{}},
		{name: "upcoming", path: "/upcoming", body: `{"minutes":3}`, queue: &fakeQueue{}},

		{name: "healthz", method: http.MethodGet, path: "/healthz", queue: &fakeQueue{}},
		{name: "readyz", method: http.MethodGet, path: "/readyz", queue: &fakeQueue{}},
		{name: "readyz-stale", method: http.MethodGet, path: "/readyz", queue: &fakeQueue{loops: []delayqueue.LoopStatus{
			{Loop: "scanner", Behind: 12500 * time.Millisecond, StaleAfter: 10 * time.Second},
			{Loop: "dispatch", Behind: time.Second, StaleAfter: 10 * time.Second},
			{Loop: "webhook", Behind: 31 * time.Second, StaleAfter: 30 * time.Second}}}},
		{name: "readyz-down", method: http.MethodGet, path: "/readyz", status: http.StatusServiceUnavailable,
			queue: &fakeQueue{err: delayqueue.ErrUnavailable}},

		{name: "fail-not-found", path: "/release", body: `{"id":"j1"}`, queue: &fakeQueue{err: delayqueue.ErrNotFound}},
		{name: "fail-invalid", path: "/push", body: `{"topic":"mail","id":"j1"}`, queue: &fakeQueue{}},
		{name: "fail-unknown-path", path: "/nope", body: `{}`, status: http.StatusNotFound, queue: &fakeQueue{}},
	}
}

// TestAnswersGolden checks every answer's bytes against those the server
// wrote before the wire types had a package of their own: field names and
// order, omitted fields, numbers, null against [], escaping and the final
// newline. A difference is a change of the API that clients see.
func TestAnswersGolden(t *testing.T) {
	dir := filepath.Join("testdata", "answers")
	if *updateGolden {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cases := goldenCases()
	if !*updateGolden {
		// A golden file no case writes any more is a check lost.
		files, err := filepath.Glob(filepath.Join(dir, "*.golden"))
		if err != nil {
			t.Fatal(err)
		}
		if len(files) != len(cases) {
			t.Errorf("%d golden files in %s for %d cases", len(files), dir, len(cases))
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method, want := tc.method, tc.status
			if method == "" {
				method = http.MethodPost
			}
			if want == 0 {
				want = http.StatusOK
			}
			got := serve(t, New(tc.queue, testOptions(), redistest.Logger(t)), method, tc.path, tc.body)
			if got.status != want {
				t.Fatalf("%s %s: status %d, want %d: %s", method, tc.path, got.status, want, got.raw)
			}
			answer := []byte(fmt.Sprintf("%s %s %s\nHTTP %s\n%s", method, tc.path, tc.body, strconv.Itoa(got.status), got.raw))
			file := filepath.Join(dir, tc.name+".golden")
			if *updateGolden {
				if err := os.WriteFile(file, answer, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			golden, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (run with -update to write it)", err)
			}
			if !bytes.Equal(answer, golden) {
				t.Errorf("answer differs from %s:\n got: %s\nwant: %s", file, answer, golden)
			}
		})
	}
}
