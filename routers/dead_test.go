package routers

import (
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// deadCase is one request to a dead-letter endpoint: the call it must make,
// or the message it must fail with.
type deadCase struct {
	name string
	body string
	want queueCall // zero op: invalid request
	msg  string
}

func runDeadCases(t *testing.T, path string, tests []deadCase) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", path, tc.body)
			calls := q.recorded()
			if tc.want.op == "" {
				if resp.status != 200 || resp.code != 1 || resp.msg != tc.msg || string(resp.data) != "null" || len(calls) != 0 {
					t.Fatalf("answer %d %s, calls %+v; want code 1 %q", resp.status, resp.raw, calls, tc.msg)
				}
				return
			}
			if resp.status != 200 || resp.code != 0 {
				t.Fatalf("answer %d %s", resp.status, resp.raw)
			}
			if len(calls) != 1 || calls[0].op != tc.want.op || calls[0].topic != tc.want.topic || calls[0].id != tc.want.id ||
				calls[0].count != tc.want.count || calls[0].offset != tc.want.offset || calls[0].limit != tc.want.limit {
				t.Fatalf("calls = %+v\nwant %+v", calls, tc.want)
			}
		})
	}
}

func TestDeadListRequest(t *testing.T) {
	t.Parallel()
	runDeadCases(t, "/dead/list", []deadCase{
		{"defaults", `{"topic":"t"}`, queueCall{op: "deadList", topic: "t", limit: 50}, ""},
		{"paged", `{"topic":" t ","offset":100,"limit":1000}`, queueCall{op: "deadList", topic: "t", offset: 100, limit: 1000}, ""},
		{"null limit is the default", `{"topic":"t","limit":null}`, queueCall{op: "deadList", topic: "t", limit: 50}, ""},
		{"largest offset", `{"topic":"t","offset":2147483647,"limit":1}`, queueCall{op: "deadList", topic: "t", offset: 2147483647, limit: 1}, ""},
		{"topic missing", `{}`, queueCall{}, "topic is required and must not be blank"},
		{"topic with a comma", `{"topic":"a,b"}`, queueCall{}, "topic must not contain a comma (commas separate topics in /pop)"},
		{"topic invalid UTF-8", "{\"topic\":\"\xff\"}", queueCall{}, "topic must be valid UTF-8"},
		{"limit 0", `{"topic":"t","limit":0}`, queueCall{}, "limit must be an integer between 1 and 1000, got 0"},
		{"limit 1001", `{"topic":"t","limit":1001}`, queueCall{}, "limit must be an integer between 1 and 1000, got 1001"},
		{"offset negative", `{"topic":"t","offset":-1}`, queueCall{}, "offset must be an integer between 0 and 2147483647, got -1"},
		{"offset a string", `{"topic":"t","offset":"1"}`, queueCall{}, "offset must be an integer between 0 and 2147483647, got a string"},
	})
}

func TestDeadListAnswers(t *testing.T) {
	t.Parallel()
	created := time.UnixMilli(1_700_000_000_001)
	died := time.UnixMilli(1_700_000_100_002)
	q := &fakeQueue{deadTotal: 7, deadJobs: []delayqueue.JobInfo{
		{ID: "b", Topic: "t", Body: "x", Attempts: 2, State: delayqueue.StateDead, DeadReason: delayqueue.ReasonReleased,
			DeadAt: died, CreatedAt: created, Retry: []int{1}},
		{ID: "a", Topic: "t", Attempts: 8, State: delayqueue.StateDead, DeadReason: delayqueue.ReasonTTRExpired,
			DeadAt: died.Add(-time.Second), CreatedAt: created},
	}}
	resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/dead/list", `{"topic":"t","limit":2}`)
	want := `{"code":0,"message":"ok","data":{"total":7,"jobs":[` +
		`{"id":"b","topic":"t","body":"x","attempts":2,"reason":"released","dead_at":1700000100,"dead_at_ms":1700000100002,"created_at":1700000000,"created_at_ms":1700000000001},` +
		`{"id":"a","topic":"t","body":"","attempts":8,"reason":"ttr-expired","dead_at":1700000099,"dead_at_ms":1700000099002,"created_at":1700000000,"created_at_ms":1700000000001}]}}`
	if resp.raw != want+"\n" {
		t.Fatalf("answer %s\nwant   %s", resp.raw, want)
	}

	empty := serve(t, New(&fakeQueue{}, testOptions(), redistest.Logger(t)), "POST", "/dead/list", `{"topic":"t"}`)
	if want := `{"code":0,"message":"ok","data":{"total":0,"jobs":[]}}`; empty.raw != want+"\n" {
		t.Fatalf("answer %s\nwant   %s", empty.raw, want)
	}
}

func TestDeadKickRequest(t *testing.T) {
	t.Parallel()
	runDeadCases(t, "/dead/kick", []deadCase{
		{"one id", `{"topic":"t","id":" x "}`, queueCall{op: "deadKick", topic: "t", id: "x"}, ""},
		{"the oldest", `{"topic":"t","count":10}`, queueCall{op: "deadKick", topic: "t", count: 10}, ""},
		{"largest count", `{"topic":"t","count":1000}`, queueCall{op: "deadKick", topic: "t", count: 1000}, ""},
		{"null count beside an id", `{"topic":"t","id":"x","count":null}`, queueCall{op: "deadKick", topic: "t", id: "x"}, ""},
		{"neither", `{"topic":"t"}`, queueCall{}, "id or count is required: the dead letter to kick, or how many of the oldest"},
		{"both", `{"topic":"t","id":"x","count":1}`, queueCall{}, "give either id or count, not both"},
		{"count 0", `{"topic":"t","count":0}`, queueCall{}, "count must be an integer between 1 and 1000 (the oldest are kicked), got 0"},
		{"count 1001", `{"topic":"t","count":1001}`, queueCall{}, "count must be an integer between 1 and 1000 (the oldest are kicked), got 1001"},
		{"id blank", `{"topic":"t","id":" "}`, queueCall{}, "id is required and must not be blank"},
		{"topic missing", `{"id":"x"}`, queueCall{}, "topic is required and must not be blank"},
	})
}

func TestDeadKickAnswers(t *testing.T) {
	t.Parallel()
	for kicked, want := range map[string]string{
		"a,b": `{"code":0,"message":"kicked 2","data":{"kicked":["a","b"]}}`,
		"":    `{"code":0,"message":"kicked 0","data":{"kicked":[]}}`,
	} {
		q := &fakeQueue{}
		if kicked != "" {
			q.kicked = strings.Split(kicked, ",")
		}
		resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/dead/kick", `{"topic":"t","count":5}`)
		if resp.raw != want+"\n" {
			t.Errorf("answer %s\nwant   %s", resp.raw, want)
		}
	}
}

func TestDeadDeleteRequest(t *testing.T) {
	t.Parallel()
	runDeadCases(t, "/dead/delete", []deadCase{
		{"one id", `{"topic":"t","id":"x"}`, queueCall{op: "deadDelete", topic: "t", id: "x"}, ""},
		{"all", `{"topic":"t","all":true}`, queueCall{op: "deadDelete", topic: "t"}, ""},
		{"neither", `{"topic":"t"}`, queueCall{}, `id or "all": true is required: the dead letter to delete, or all of the topic's`},
		{"both", `{"topic":"t","id":"x","all":true}`, queueCall{}, "give either id or all, not both"},
		{"all false", `{"topic":"t","all":false}`, queueCall{}, "all must be true (to delete every dead letter of the topic) or left out"},
		{"all a string", `{"topic":"t","all":"yes"}`, queueCall{}, "all must be true or false, got a string"},
		{"all a number", `{"topic":"t","all":1}`, queueCall{}, "all must be true or false, got a number"},
		{"topic blank", `{"topic":"","all":true}`, queueCall{}, "topic is required and must not be blank"},
	})
	q := &fakeQueue{deleted: 3}
	resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/dead/delete", `{"topic":"t","all":true}`)
	if want := `{"code":0,"message":"deleted","data":{"deleted":3}}`; resp.raw != want+"\n" {
		t.Fatalf("answer %s\nwant   %s", resp.raw, want)
	}
}
