package routers

import (
	"encoding/json"
	"testing"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

func TestStats(t *testing.T) {
	t.Parallel()
	counts := map[string]delayqueue.TopicStats{
		"mail":  {Delay: 1, Ready: 2, Reserved: 3, Dead: 4},
		"order": {},
	}
	tests := []struct {
		name      string
		body      string
		stats     map[string]delayqueue.TopicStats
		wantTopic string
		want      string
	}{
		{"all topics", `{}`, counts, "",
			`{"code":0,"message":"ok","data":{"mail":{"delay":1,"ready":2,"reserved":3,"dead":4},"order":{"delay":0,"ready":0,"reserved":0,"dead":0}}}`},
		{"null topic is all", `{"topic":null}`, counts, "",
			`{"code":0,"message":"ok","data":{"mail":{"delay":1,"ready":2,"reserved":3,"dead":4},"order":{"delay":0,"ready":0,"reserved":0,"dead":0}}}`},
		{"one topic", `{"topic":" mail "}`, map[string]delayqueue.TopicStats{"mail": counts["mail"]}, "mail",
			`{"code":0,"message":"ok","data":{"mail":{"delay":1,"ready":2,"reserved":3,"dead":4}}}`},
		{"no topics", `{}`, nil, "", `{"code":0,"message":"ok","data":{}}`},
		// No field is needed, so no body is needed either (as for /topics).
		{"empty body is all topics", ``, counts, "",
			`{"code":0,"message":"ok","data":{"mail":{"delay":1,"ready":2,"reserved":3,"dead":4},"order":{"delay":0,"ready":0,"reserved":0,"dead":0}}}`},
		{"blank body is all topics", " \n", nil, "", `{"code":0,"message":"ok","data":{}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{stats: tc.stats}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/stats", tc.body)
			if resp.raw != tc.want+"\n" {
				t.Fatalf("answer %s\nwant   %s", resp.raw, tc.want)
			}
			if calls := q.recorded(); len(calls) != 1 || calls[0].op != "stats" || calls[0].topic != tc.wantTopic {
				t.Fatalf("calls = %+v, want stats(%q)", calls, tc.wantTopic)
			}
		})
	}

	for body, want := range map[string]string{
		`[]`:                 "request body must be a JSON object, got an array",
		`{"topic":""}`:       "topic is required and must not be blank",
		`{"topic":"a,b"}`:    "topic must not contain a comma (commas separate topics in /pop)",
		`{"topic":5}`:        "topic must be a string, got a number",
		`{"topic":"\udfff"}`: "topic must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)",
	} {
		q := &fakeQueue{}
		resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/stats", body)
		if resp.code != 1 || resp.msg != want || len(q.recorded()) != 0 {
			t.Errorf("%q: answer %s, want code 1 %q", body, resp.raw, want)
		}
	}
}

func TestTopics(t *testing.T) {
	t.Parallel()
	for _, body := range []string{``, " \n", `{}`, `{"anything":1}`} {
		q := &fakeQueue{topicNames: []string{"a", "b"}}
		resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/topics", body)
		if want := `{"code":0,"message":"ok","data":["a","b"]}`; resp.raw != want+"\n" {
			t.Errorf("%q: answer %s\nwant   %s", body, resp.raw, want)
		}
	}
	resp := serve(t, New(&fakeQueue{}, testOptions(), redistest.Logger(t)), "POST", "/topics", `{}`)
	if want := `{"code":0,"message":"ok","data":[]}`; resp.raw != want+"\n" {
		t.Errorf("no topics: answer %s\nwant   %s", resp.raw, want)
	}
	for body, want := range map[string]string{
		`[]`:   "request body must be a JSON object, got an array",
		`{`:    "request body is not valid JSON: it ends too early",
		`{}{}`: "request body has data after the JSON object",
		`null`: "request body must be a JSON object, got null",
	} {
		q := &fakeQueue{}
		resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/topics", body)
		if resp.code != 1 || resp.msg != want || len(q.recorded()) != 0 {
			t.Errorf("%q: answer %s, want code 1 %q", body, resp.raw, want)
		}
	}
}

func TestUpcoming(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		body      string
		wantCode  int
		wantSlots int
		wantMsg   string
	}{
		{"empty body is the next hour", ``, 0, 60, ""},
		{"empty object", `{}`, 0, 60, ""},
		{"a day", `{"minutes":1440}`, 0, 1440, ""},
		{"zero minutes", `{"minutes":0}`, 1, 0, "minutes must be an integer between 1 and 1440 (minutes), got 0"},
		{"a fraction", `{"minutes":1.5}`, 1, 0, "minutes must be an integer between 1 and 1440 (minutes), got 1.5"},
		{"not an object", `[1]`, 1, 0, "request body must be a JSON object, got an array"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/upcoming", tc.body)
			if resp.status != 200 || resp.code != tc.wantCode {
				t.Fatalf("answer %d %s, want 200 with code %d", resp.status, resp.raw, tc.wantCode)
			}
			if tc.wantCode != 0 {
				if resp.msg != tc.wantMsg {
					t.Errorf("message %q, want %q", resp.msg, tc.wantMsg)
				}
				return
			}
			var view wire.Upcoming
			if err := json.Unmarshal(resp.data, &view); err != nil {
				t.Fatal(err)
			}
			if len(view.Counts) != tc.wantSlots || view.StepSeconds != 60 || view.StartMS != 1_700_000_000_123 || view.Start != 1_700_000_000 {
				t.Fatalf("data = %s", resp.data)
			}
		})
	}
}
