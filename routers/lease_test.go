package routers

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

func durationPtr(d time.Duration) *time.Duration { return &d }

func TestReleaseRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		body        string
		wantID      string // "" when the request is invalid
		wantDelay   *time.Duration
		wantAttempt int
		want        string // message of an invalid request
	}{
		{"id only: the schedule decides", `{"id":"1"}`, "1", nil, 0, ""},
		{"delay overrides", `{"id":" 1 ","delay":30}`, "1", durationPtr(30 * time.Second), 0, ""},
		{"delay 0 is ready now", `{"id":"1","delay":0}`, "1", durationPtr(0), 0, ""},
		{"largest delay", `{"id":"1","delay":2147483647}`, "1", durationPtr(2147483647 * time.Second), 0, ""},
		{"null delay is absent", `{"id":"1","delay":null}`, "1", nil, 0, ""},
		{"attempt", `{"id":"1","attempt":3}`, "1", nil, 3, ""},
		{"all", `{"id":"1","delay":5,"attempt":1}`, "1", durationPtr(5 * time.Second), 1, ""},
		{"id missing", `{"delay":5}`, "", nil, 0, "id is required and must not be blank"},
		{"id a number", `{"id":1}`, "", nil, 0, "id must be a string, got a number"},
		{"delay negative", `{"id":"1","delay":-1}`, "", nil, 0, "delay must be an integer between 0 and 2147483647 (seconds), got -1"},
		{"delay too large", `{"id":"1","delay":2147483648}`, "", nil, 0, "delay must be an integer between 0 and 2147483647 (seconds), got 2147483648"},
		{"delay a fraction", `{"id":"1","delay":0.5}`, "", nil, 0, "delay must be an integer between 0 and 2147483647 (seconds), got 0.5"},
		{"attempt 0", `{"id":"1","attempt":0}`, "", nil, 0, "attempt must be an integer between 1 and 2147483647 (the attempts of the delivery, as /pop gave them), got 0"},
		{"attempt a string", `{"id":"1","attempt":"2"}`, "", nil, 0, "attempt must be an integer between 1 and 2147483647 (the attempts of the delivery, as /pop gave them), got a string"},
		{"not an object", `["1"]`, "", nil, 0, "request body must be a JSON object, got an array"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			due := time.UnixMilli(1_700_000_005_250)
			q := &fakeQueue{state: delayqueue.StateDelay, due: due}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/release", tc.body)
			calls := q.recorded()
			if tc.wantID == "" {
				if resp.code != 1 || resp.msg != tc.want || string(resp.data) != "null" || len(calls) != 0 {
					t.Fatalf("answer %s, calls %+v; want code 1 %q", resp.raw, calls, tc.want)
				}
				return
			}
			want := `{"code":0,"message":"released","data":{"state":"delay","due":1700000005,"due_ms":1700000005250}}`
			if resp.raw != want+"\n" {
				t.Fatalf("answer %s\nwant   %s", resp.raw, want)
			}
			if len(calls) != 1 || calls[0].op != "release" || calls[0].id != tc.wantID ||
				!reflect.DeepEqual(calls[0].delay, tc.wantDelay) || calls[0].attempt != tc.wantAttempt {
				t.Fatalf("calls = %+v, want release(%q, %v, %d)", calls, tc.wantID, tc.wantDelay, tc.wantAttempt)
			}
		})
	}
}

func TestReleaseAnswers(t *testing.T) {
	t.Parallel()
	now := time.UnixMilli(1_700_000_000_100)
	tests := []struct {
		name  string
		state string
		due   time.Time
		want  string
	}{
		{"back to delay", delayqueue.StateDelay, now.Add(time.Minute),
			`{"code":0,"message":"released","data":{"state":"delay","due":1700000060,"due_ms":1700000060100}}`},
		{"ready at once", delayqueue.StateReady, now,
			`{"code":0,"message":"released","data":{"state":"ready","due":1700000000,"due_ms":1700000000100}}`},
		{"attempts used up", delayqueue.StateDead, now,
			`{"code":0,"message":"released; its attempts are used up, so the job is dead-lettered","data":{"state":"dead","due":1700000000,"due_ms":1700000000100}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{state: tc.state, due: tc.due}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/release", `{"id":"1"}`)
			if resp.raw != tc.want+"\n" {
				t.Fatalf("answer %s\nwant   %s", resp.raw, tc.want)
			}
		})
	}
}

func TestTouchRequest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		body        string
		wantID      string
		wantAttempt int
		want        string
	}{
		{"id only", `{"id":"1"}`, "1", 0, ""},
		{"attempt", `{"id":"1","attempt":2}`, "1", 2, ""},
		{"delay is not a touch field", `{"id":"1","delay":"whatever"}`, "1", 0, ""},
		{"id blank", `{"id":""}`, "", 0, "id is required and must not be blank"},
		{"attempt negative", `{"id":"1","attempt":-2}`, "", 0, "attempt must be an integer between 1 and 2147483647 (the attempts of the delivery, as /pop gave them), got -2"},
		{"attempt too large", `{"id":"1","attempt":2147483648}`, "", 0, "attempt must be an integer between 1 and 2147483647 (the attempts of the delivery, as /pop gave them), got 2147483648"},
		{"empty body", ``, "", 0, "request body is empty: send a JSON object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{leaseUntil: time.UnixMilli(1_700_000_030_999)}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/touch", tc.body)
			calls := q.recorded()
			if tc.wantID == "" {
				if resp.code != 1 || resp.msg != tc.want || string(resp.data) != "null" || len(calls) != 0 {
					t.Fatalf("answer %s, calls %+v; want code 1 %q", resp.raw, calls, tc.want)
				}
				return
			}
			want := `{"code":0,"message":"touched","data":{"lease_until":1700000030,"lease_until_ms":1700000030999}}`
			if resp.raw != want+"\n" {
				t.Fatalf("answer %s\nwant   %s", resp.raw, want)
			}
			if len(calls) != 1 || calls[0].op != "touch" || calls[0].id != tc.wantID || calls[0].attempt != tc.wantAttempt {
				t.Fatalf("calls = %+v, want touch(%q, %d)", calls, tc.wantID, tc.wantAttempt)
			}
		})
	}
}

// The engine's refusals of a release or touch, with the detail the request
// and the engine give.
func TestLeaseRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		path    string
		body    string
		q       *fakeQueue
		want    string
		wantOps []string
	}{
		{"release unknown id", "/release", `{"id":"1"}`,
			&fakeQueue{err: fmt.Errorf("release 1: %w", delayqueue.ErrNotFound)}, "job not found", []string{"release"}},
		{"release of a delayed job", "/release", `{"id":"1"}`,
			&fakeQueue{state: delayqueue.StateDelay, err: fmt.Errorf("release 1: %w (it is delay)", delayqueue.ErrNotReserved)},
			"job is not reserved (it is delay)", []string{"release"}},
		{"release of a ready job", "/release", `{"id":"1","attempt":1}`,
			&fakeQueue{state: delayqueue.StateReady, err: delayqueue.ErrNotReserved},
			"job is not reserved (it is ready)", []string{"release"}},
		{"release, state unknown", "/release", `{"id":"1"}`,
			&fakeQueue{err: delayqueue.ErrNotReserved}, "job is not reserved", []string{"release"}},
		{"release of a dead job", "/release", `{"id":"1"}`,
			&fakeQueue{state: delayqueue.StateDead, err: fmt.Errorf("release 1: %w", delayqueue.ErrDead)},
			"job is dead-lettered", []string{"release"}},
		{"release of a stale delivery", "/release", `{"id":"1","attempt":3}`,
			&fakeQueue{state: delayqueue.StateReserved, err: fmt.Errorf("release 1: %w", delayqueue.ErrStaleDelivery)},
			"stale delivery: attempt 3 is not the job's current delivery", []string{"release"}},
		{"release of a webhook job", "/release", `{"id":"1"}`,
			&fakeQueue{state: delayqueue.StateReserved, err: fmt.Errorf("release 1: %w", delayqueue.ErrWebhookJob)},
			"job is a webhook job: the server releases it when its call fails", []string{"release"}},
		{"release: redis down", "/release", `{"id":"1"}`,
			&fakeQueue{err: delayqueue.ErrUnavailable}, "redis unavailable, try again", []string{"release"}},
		{"touch unknown id", "/touch", `{"id":"1"}`,
			&fakeQueue{err: delayqueue.ErrNotFound}, "job not found", []string{"touch"}},
		{"touch of a delayed job names its state", "/touch", `{"id":"1"}`,
			&fakeQueue{state: delayqueue.StateDelay, opErr: map[string]error{"touch": delayqueue.ErrNotReserved}},
			"job is not reserved (it is delay)", []string{"touch"}},
		{"touch refused with no state known", "/touch", `{"id":"1"}`,
			&fakeQueue{opErr: map[string]error{"touch": delayqueue.ErrNotReserved}}, "job is not reserved", []string{"touch"}},
		{"touch of a dead job", "/touch", `{"id":"1"}`,
			&fakeQueue{err: delayqueue.ErrDead}, "job is dead-lettered", []string{"touch"}},
		{"touch of a stale delivery", "/touch", `{"id":"1","attempt":1}`,
			&fakeQueue{err: delayqueue.ErrStaleDelivery}, "stale delivery: attempt 1 is not the job's current delivery", []string{"touch"}},
		{"stale without an attempt (not from this engine)", "/touch", `{"id":"1"}`,
			&fakeQueue{err: delayqueue.ErrStaleDelivery}, "stale delivery: the attempt is not the job's current delivery", []string{"touch"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := serve(t, New(tc.q, testOptions(), redistest.Logger(t)), "POST", tc.path, tc.body)
			if resp.status != 200 || resp.code != 1 || resp.msg != tc.want || string(resp.data) != "null" {
				t.Fatalf("answer %d %s\nwant code 1 %q", resp.status, resp.raw, tc.want)
			}
			var ops []string
			for _, c := range tc.q.recorded() {
				ops = append(ops, c.op)
			}
			if strings.Join(ops, ",") != strings.Join(tc.wantOps, ",") {
				t.Fatalf("calls %v, want %v", ops, tc.wantOps)
			}
		})
	}
}
