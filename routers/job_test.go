package routers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// /finish, /delete and /get take the same {"id"} body.
func TestIDEndpoints(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		body   string
		wantID string // "" when the request is invalid
		want   string // message of an invalid request
	}{
		{"plain id", `{"id":"15"}`, "15", ""},
		{"id trimmed", `{"id":" 15\n"}`, "15", ""},
		{"unicode id", `{"id":"ид-\u00e9"}`, "ид-é", ""},
		{"longest id", `{"id":"` + strings.Repeat("i", 256) + `"}`, strings.Repeat("i", 256), ""},
		{"unknown fields ignored", `{"id":"1","topic":5}`, "1", ""},
		{"id missing", `{}`, "", "id is required and must not be blank"},
		{"id blank", `{"id":" "}`, "", "id is required and must not be blank"},
		{"id too long", `{"id":"` + strings.Repeat("i", 257) + `"}`, "", "id must be at most 256 bytes, got 257"},
		{"id a number", `{"id":15}`, "", "id must be a string, got a number"},
		{"id invalid UTF-8", "{\"id\":\"\xc3\x28\"}", "", "id must be valid UTF-8"},
		{"id lone surrogate", `{"id":"\ud800"}`, "", "id must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},
		{"empty body", ``, "", "request body is empty: send a JSON object"},
		{"a string", `"15"`, "", "request body must be a JSON object, got a string"},
		{"data after", `{"id":"1"},`, "", "request body has data after the JSON object"},
	}
	endpoints := []struct {
		path, op, success string
	}{
		{"/finish", "finish", `{"code":0,"message":"finished","data":null}`},
		{"/delete", "delete", `{"code":0,"message":"deleted","data":null}`},
		{"/get", "get", `{"code":0,"message":"job not found","data":null}`},
	}
	for _, ep := range endpoints {
		for _, tc := range tests {
			t.Run(ep.op+"/"+tc.name, func(t *testing.T) {
				q := &fakeQueue{} // unknown ids: Finish/Delete return nil, Get (nil, nil)
				resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", ep.path, tc.body)
				calls := q.recorded()
				if tc.wantID == "" {
					if resp.status != 200 || resp.code != 1 || resp.msg != tc.want {
						t.Fatalf("answer %d %s, want code 1 %q", resp.status, resp.raw, tc.want)
					}
					if len(calls) != 0 {
						t.Fatalf("queue called for an invalid request: %+v", calls)
					}
					return
				}
				if resp.status != 200 || resp.raw != ep.success+"\n" {
					t.Fatalf("answer %d %s, want %s", resp.status, resp.raw, ep.success)
				}
				if len(calls) != 1 || calls[0].op != ep.op || calls[0].id != tc.wantID {
					t.Fatalf("calls = %+v, want one %s(%q)", calls, ep.op, tc.wantID)
				}
			})
		}
	}
}

func TestFinishDeleteIDs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		body    string
		wantIDs []string // nil when the request is invalid
		want    string   // message of an invalid request
	}{
		{"one id in a list", `{"ids":["a"]}`, []string{"a"}, ""},
		{"ids trimmed, repeats dropped, order kept", `{"ids":[" b ","a","b","c","a"]}`, []string{"b", "a", "c"}, ""},
		{"1000 ids", `{"ids":[` + quotedIDs(1000) + `]}`, strings.Split(strings.ReplaceAll(quotedIDs(1000), `"`, ""), ","), ""},
		{"null id beside ids", `{"id":null,"ids":["a"]}`, []string{"a"}, ""},
		{"both id and ids", `{"id":"a","ids":["a"]}`, nil, "give either id or ids, not both"},
		{"ids empty", `{"ids":[]}`, nil, "ids must hold 1 to 1000 ids, got 0"},
		{"1001 ids", `{"ids":[` + quotedIDs(1001) + `]}`, nil, "ids must hold 1 to 1000 ids, got 1001"},
		{"ids a string", `{"ids":"a,b"}`, nil, "ids must be an array of ids, got a string"},
		{"an id a number", `{"ids":["a",5]}`, nil, "ids[1] must be a string, got a number"},
		{"an id null", `{"ids":[null]}`, nil, "ids[0] must be a string, got null"},
		{"an id blank", `{"ids":["a"," "]}`, nil, "ids[1] is required and must not be blank"},
		{"an id too long", `{"ids":["` + strings.Repeat("i", 257) + `"]}`, nil, "ids[0] must be at most 256 bytes, got 257"},
		{"an id invalid UTF-8", "{\"ids\":[\"a\",\"\xc3\x28\"]}", nil, "ids[1] must be valid UTF-8"},
		{"an id lone surrogate", `{"ids":["\udc00"]}`, nil, "ids[0] must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},
	}
	endpoints := []struct {
		path, op, success string
	}{
		{"/finish", "finishBatch", `{"code":0,"message":"finished","data":{"finished":%d,"dead":[]}}`},
		{"/delete", "deleteBatch", `{"code":0,"message":"deleted","data":{"deleted":%d}}`},
	}
	for _, ep := range endpoints {
		for _, tc := range tests {
			t.Run(ep.path+"/"+tc.name, func(t *testing.T) {
				q := &fakeQueue{deleted: 7}
				opts := testOptions()
				opts.MaxBodyBytes = 1 << 20
				resp := serve(t, New(q, opts, redistest.Logger(t)), "POST", ep.path, tc.body)
				calls := q.recorded()
				if tc.wantIDs == nil {
					if resp.status != 200 || resp.code != 1 || resp.msg != tc.want || string(resp.data) != "null" {
						t.Fatalf("answer %d %s, want code 1 %q", resp.status, resp.raw, tc.want)
					}
					if len(calls) != 0 {
						t.Fatalf("queue called for an invalid request: %+v", calls)
					}
					return
				}
				// The fake deletes the first 7 ids; it finishes every one.
				want := fmt.Sprintf(ep.success, len(tc.wantIDs))
				if ep.op == "deleteBatch" {
					want = fmt.Sprintf(ep.success, min(len(tc.wantIDs), 7))
				}
				if resp.status != 200 || resp.raw != want+"\n" {
					t.Fatalf("answer %d %s, want %s", resp.status, resp.raw, want)
				}
				if len(calls) != 1 || calls[0].op != ep.op || !reflect.DeepEqual(calls[0].ids, tc.wantIDs) {
					t.Fatalf("calls = %+v, want one %s(%q)", calls, ep.op, tc.wantIDs)
				}
			})
		}
	}
}

func quotedIDs(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf(`"id%d"`, i)
	}
	return strings.Join(ids, ",")
}

// A batch finish that meets dead letters finishes the others and says which
// it refused.
func TestFinishBatchDead(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		dead []string
		want string
	}{
		{"none dead", nil, `{"code":0,"message":"finished","data":{"finished":3,"dead":[]}}`},
		{"one dead", []string{"b"}, `{"code":1,"message":"1 job is dead-lettered","data":{"finished":2,"dead":["b"]}}`},
		{"two dead", []string{"a", "c"}, `{"code":1,"message":"2 jobs are dead-lettered","data":{"finished":1,"dead":["a","c"]}}`},
		{"all dead", []string{"a", "b", "c"}, `{"code":1,"message":"3 jobs are dead-lettered","data":{"finished":0,"dead":["a","b","c"]}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{dead: tc.dead}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/finish", `{"ids":["a","b","c"]}`)
			if resp.status != 200 || resp.raw != tc.want+"\n" {
				t.Fatalf("answer %d %s\nwant %s", resp.status, resp.raw, tc.want)
			}
		})
	}
}

func TestGetAnswers(t *testing.T) {
	t.Parallel()
	due := time.UnixMilli(1_700_000_123_456)
	created := time.UnixMilli(1_700_000_000_999)
	tests := []struct {
		name string
		info *delayqueue.JobInfo
		want string
	}{
		{"delayed job", &delayqueue.JobInfo{ID: "15", Topic: "order", Body: "hi", TTR: 30 * time.Second,
			DueAt: due, State: delayqueue.StateDelay, CreatedAt: created},
			`{"code":0,"message":"ok","data":{"topic":"order","id":"15","delay":1700000123,"ttr":30,"body":"hi",` +
				`"delay_ms":1700000123456,"state":"delay","attempts":0,"created_at":1700000000,"created_at_ms":1700000000999,` +
				`"max_attempts":0,"retry":[],"attempts_limit":0}}`},
		{"with a schedule", &delayqueue.JobInfo{ID: "15", Topic: "order", TTR: 30 * time.Second,
			DueAt: due, State: delayqueue.StateReady, CreatedAt: created, Retry: []int{120, 600}, MaxAttempts: 5},
			`{"code":0,"message":"ok","data":{"topic":"order","id":"15","delay":1700000123,"ttr":30,"body":"",` +
				`"delay_ms":1700000123456,"state":"ready","attempts":0,"created_at":1700000000,"created_at_ms":1700000000999,` +
				`"max_attempts":5,"retry":[120,600],"attempts_limit":5}}`},
		{"a schedule without max_attempts has a limit", &delayqueue.JobInfo{ID: "15", Topic: "order", TTR: 30 * time.Second,
			DueAt: due, State: delayqueue.StateReady, CreatedAt: created, Retry: []int{120, 600}},
			`{"code":0,"message":"ok","data":{"topic":"order","id":"15","delay":1700000123,"ttr":30,"body":"",` +
				`"delay_ms":1700000123456,"state":"ready","attempts":0,"created_at":1700000000,"created_at_ms":1700000000999,` +
				`"max_attempts":0,"retry":[120,600],"attempts_limit":3}}`},
		{"reserved job has its lease", &delayqueue.JobInfo{ID: "7", Topic: "t", Body: "", TTR: time.Second,
			DueAt: due, State: delayqueue.StateReserved, Attempts: 3, CreatedAt: created, LeaseUntil: due.Add(time.Second)},
			`{"code":0,"message":"ok","data":{"topic":"t","id":"7","delay":1700000123,"ttr":1,"body":"",` +
				`"delay_ms":1700000123456,"state":"reserved","attempts":3,"created_at":1700000000,"created_at_ms":1700000000999,` +
				`"max_attempts":0,"retry":[],"attempts_limit":0,"lease_until":1700000124,"lease_until_ms":1700000124456}}`},
		{"dead job has reason and time", &delayqueue.JobInfo{ID: "7", Topic: "t", TTR: time.Second,
			DueAt: due, State: delayqueue.StateDead, Attempts: 2, CreatedAt: created, Retry: []int{1}, MaxAttempts: 2,
			DeadReason: delayqueue.ReasonReleased, DeadAt: due.Add(2 * time.Second),
			LeaseUntil: due}, // a stale lease is not shown
			`{"code":0,"message":"ok","data":{"topic":"t","id":"7","delay":1700000123,"ttr":1,"body":"",` +
				`"delay_ms":1700000123456,"state":"dead","attempts":2,"created_at":1700000000,"created_at_ms":1700000000999,` +
				`"max_attempts":2,"retry":[1],"attempts_limit":2,"dead_reason":"released","dead_at":1700000125,"dead_at_ms":1700000125456}}`},
		{"a dead reason outside the dead state is not shown", &delayqueue.JobInfo{ID: "7", Topic: "t", TTR: time.Second,
			DueAt: due, State: delayqueue.StateReady, CreatedAt: created, DeadReason: "released", DeadAt: due},
			`{"code":0,"message":"ok","data":{"topic":"t","id":"7","delay":1700000123,"ttr":1,"body":"",` +
				`"delay_ms":1700000123456,"state":"ready","attempts":0,"created_at":1700000000,"created_at_ms":1700000000999,` +
				`"max_attempts":0,"retry":[],"attempts_limit":0}}`},
		{"unknown times are 0", &delayqueue.JobInfo{ID: "old", Topic: "t", TTR: time.Minute, State: delayqueue.StateReady},
			`{"code":0,"message":"ok","data":{"topic":"t","id":"old","delay":0,"ttr":60,"body":"",` +
				`"delay_ms":0,"state":"ready","attempts":0,"created_at":0,"created_at_ms":0,"max_attempts":0,"retry":[],"attempts_limit":0}}`},
		{"unknown id", nil, `{"code":0,"message":"job not found","data":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{info: tc.info}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/get", `{"id":"15"}`)
			if resp.status != 200 || resp.raw != tc.want+"\n" {
				t.Fatalf("answer %d %s\nwant 200 %s", resp.status, resp.raw, tc.want)
			}
		})
	}
}

// /get shows a webhook job's callback as the engine stores it: every field
// of the engine's Callback, under the same name. Each field is set by
// reflection, so that a field added to the engine's and not to the answer
// fails here.
func TestCallbackAnswersEveryField(t *testing.T) {
	var cb delayqueue.Callback
	v := reflect.ValueOf(&cb).Elem()
	for i := range v.NumField() {
		switch f := v.Field(i); f.Kind() {
		case reflect.String:
			f.SetString("s" + strconv.Itoa(i))
		case reflect.Int:
			f.SetInt(int64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Map:
			f.Set(reflect.ValueOf(map[string]string{"X-Field": strconv.Itoa(i)}))
		default:
			t.Fatalf("Callback.%s is a %s: teach this test to set it", v.Type().Field(i).Name, f.Kind())
		}
	}
	stored, err := json.Marshal(cb)
	if err != nil {
		t.Fatal(err)
	}
	answered, err := json.Marshal(newCallback(&cb))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(answered, stored) {
		t.Errorf("/get shows the callback as %s, the engine stores %s", answered, stored)
	}
}
