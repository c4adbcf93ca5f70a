package routers

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

// /finish {"id","attempt"} reaches the engine's checked finish, {"id"}
// the plain one, and an attempt with ids is refused; the engine's
// refusals are answered as /release and /touch answer them.
func TestFinishAttemptRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		body     string
		opErr    map[string]error
		state    string
		wantCall queueCall // op "" when no call is made
		want     string
	}{
		{"without attempt", `{"id":"a"}`, nil, "",
			queueCall{op: "finish", id: "a"}, `{"code":0,"message":"finished","data":null}`},
		{"with attempt", `{"id":"a","attempt":3}`, nil, "",
			queueCall{op: "finishDelivery", id: "a", attempt: 3}, `{"code":0,"message":"finished","data":null}`},
		{"stale delivery", `{"id":"a","attempt":3}`,
			map[string]error{"finishDelivery": fmt.Errorf("finish a: %w", delayqueue.ErrStaleDelivery)}, delayqueue.StateReserved,
			queueCall{op: "finishDelivery", id: "a", attempt: 3},
			`{"code":1,"message":"stale delivery: attempt 3 is not the job's current delivery","data":null}`},
		{"not reserved", `{"id":"a","attempt":1}`,
			map[string]error{"finishDelivery": fmt.Errorf("finish a: %w (it is delay)", delayqueue.ErrNotReserved)}, delayqueue.StateDelay,
			queueCall{op: "finishDelivery", id: "a", attempt: 1},
			`{"code":1,"message":"job is not reserved (it is delay)","data":null}`},
		{"dead letter", `{"id":"a","attempt":1}`,
			map[string]error{"finishDelivery": fmt.Errorf("finish a: %w", delayqueue.ErrDead)}, delayqueue.StateDead,
			queueCall{op: "finishDelivery", id: "a", attempt: 1},
			`{"code":1,"message":"job is dead-lettered","data":null}`},
		{"attempt 0", `{"id":"a","attempt":0}`, nil, "", queueCall{},
			`{"code":1,"message":"attempt must be an integer between 1 and 2147483647 (the attempts of the delivery, as /pop gave them), got 0","data":null}`},
		{"attempt a string", `{"id":"a","attempt":"1"}`, nil, "", queueCall{},
			`{"code":1,"message":"attempt must be an integer between 1 and 2147483647 (the attempts of the delivery, as /pop gave them), got a string","data":null}`},
		{"attempt with ids", `{"ids":["a","b"],"attempt":1}`, nil, "", queueCall{},
			`{"code":1,"message":"attempt goes with id, not with ids: a batch finish is not checked against deliveries","data":null}`},
		{"attempt null is absent", `{"id":"a","attempt":null}`, nil, "",
			queueCall{op: "finish", id: "a"}, `{"code":0,"message":"finished","data":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{opErr: tc.opErr, state: tc.state}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/finish", tc.body)
			if resp.status != 200 || resp.raw != tc.want+"\n" {
				t.Errorf("answer %d %s\nwant 200 %s", resp.status, resp.raw, tc.want)
			}
			calls := q.recorded()
			switch {
			case tc.wantCall.op == "" && len(calls) > 0:
				t.Errorf("calls %+v, want none", calls)
			case tc.wantCall.op != "" && (len(calls) != 1 || calls[0].op != tc.wantCall.op ||
				calls[0].id != tc.wantCall.id || calls[0].attempt != tc.wantCall.attempt):
				t.Errorf("calls %+v, want %+v", calls, tc.wantCall)
			}
		})
	}
}

// /delete takes no attempt: one sent is ignored, as unknown fields are.
func TestDeleteIgnoresAttempt(t *testing.T) {
	t.Parallel()
	q := &fakeQueue{}
	resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/delete", `{"id":"a","attempt":2}`)
	if resp.code != 0 {
		t.Fatalf("answer %s", resp.raw)
	}
	if calls := q.recorded(); len(calls) != 1 || calls[0].op != "delete" || calls[0].id != "a" {
		t.Fatalf("calls %+v", calls)
	}
}

// Finishing with a receipt through HTTP against the engine: a stale
// delivery, one no longer reserved and a dead letter are refused and
// change nothing; the current delivery finishes the job.
func e2eFinishWithReceipt(t *testing.T, url string) {
	mustSucceed(t, url, "/push", `{"topic":"receipt","id":"F1","ttr":30}`)
	if d := popUntil(t, url, "receipt", 5*time.Second); d.ID != "F1" || d.Attempts != 1 {
		t.Fatalf("delivery %+v", d)
	}
	before := getJob(t, url, "F1")
	mustFail(t, url, "/finish", `{"id":"F1","attempt":2}`, "stale delivery: attempt 2 is not the job's current delivery")
	if job := getJob(t, url, "F1"); job == nil || !reflect.DeepEqual(job, before) {
		t.Fatalf("a stale finish changed the job: %+v, was %+v", job, before)
	}

	// Released and delivered again: the first delivery's receipt is stale.
	mustSucceed(t, url, "/release", `{"id":"F1","attempt":1,"delay":0}`)
	mustFail(t, url, "/finish", `{"id":"F1","attempt":1}`, "job is not reserved (it is ready)")
	if d := popUntil(t, url, "receipt", 5*time.Second); d.ID != "F1" || d.Attempts != 2 {
		t.Fatalf("second delivery %+v", d)
	}
	mustFail(t, url, "/finish", `{"id":"F1","attempt":1}`, "stale delivery: attempt 1 is not the job's current delivery")
	if job := getJob(t, url, "F1"); job == nil || job.State != delayqueue.StateReserved || job.Attempts != 2 {
		t.Fatalf("a stale finish changed the job: %+v", job)
	}
	mustSucceed(t, url, "/finish", `{"id":"F1","attempt":2}`)
	if job := getJob(t, url, "F1"); job != nil {
		t.Fatalf("finished with its receipt, the job is still %+v", job)
	}
	mustSucceed(t, url, "/finish", `{"id":"F1","attempt":2}`) // unknown id: code 0

	mustSucceed(t, url, "/push", `{"topic":"receipt","id":"F2","delay":100,"ttr":30}`)
	mustFail(t, url, "/finish", `{"id":"F2","attempt":1}`, "job is not reserved (it is delay)")
	if job := getJob(t, url, "F2"); job == nil || job.State != delayqueue.StateDelay {
		t.Fatalf("a refused finish changed the job: %+v", job)
	}

	mustSucceed(t, url, "/push", `{"topic":"receipt","id":"F3","ttr":30,"max_attempts":1}`)
	if d := popUntil(t, url, "receipt", 5*time.Second); d.ID != "F3" {
		t.Fatalf("delivery %+v", d)
	}
	mustSucceed(t, url, "/release", `{"id":"F3","attempt":1}`)
	mustFail(t, url, "/finish", `{"id":"F3","attempt":1}`, "job is dead-lettered")
	mustFail(t, url, "/finish", `{"id":"F3"}`, "job is dead-lettered")
	if job := getJob(t, url, "F3"); job == nil || job.State != delayqueue.StateDead {
		t.Fatalf("a refused finish changed the dead letter: %+v", job)
	}
	checkStats(t, url, "receipt", wire.TopicStats{Delay: 1, Dead: 1})

	// The ids form is unchanged: F2 is finished, the dead F3 left alone.
	got := mustFail(t, url, "/finish", `{"ids":["F2","F3"]}`, "1 job is dead-lettered")
	if string(got.data) != `{"finished":1,"dead":["F3"]}` {
		t.Fatalf("finish ids: %s", got.raw)
	}
	checkStats(t, url, "receipt", wire.TopicStats{Dead: 1})
	mustSucceed(t, url, "/delete", `{"id":"F3"}`)
}
