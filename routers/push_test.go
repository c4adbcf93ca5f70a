package routers

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

func TestPushAccepts(t *testing.T) {
	t.Parallel()
	long := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name string
		body string
		want delayqueue.Job
	}{
		{"callback without ttr", `{"topic":"pay","id":"7","body":"b","callback":{"url":"https://merchant.example/n?x=1","method":"put","headers":{"Authorization":"t"},"timeout":5,"follow_redirects":true}}`,
			delayqueue.Job{Topic: "pay", ID: "7", Body: "b", Callback: &delayqueue.Callback{URL: "https://merchant.example/n?x=1",
				Method: "PUT", Headers: map[string]string{"Authorization": "t"}, TimeoutSeconds: 5, FollowRedirects: true}}},
		{"all fields", `{"topic":"order","id":"15","delay":10,"ttr":30,"body":"hello"}`,
			delayqueue.Job{Topic: "order", ID: "15", Delay: 10 * time.Second, TTR: 30 * time.Second, Body: "hello"}},
		{"delay 0 is ready now", `{"topic":"t","id":"1","delay":0,"ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"missing delay is 0", `{"topic":"t","id":"1","ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"null delay is 0", `{"topic":"t","id":"1","delay":null,"ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"negative zero", `{"topic":"t","id":"1","delay":-0,"ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"largest delay", `{"topic":"t","id":"1","delay":2147483647,"ttr":86400}`,
			delayqueue.Job{Topic: "t", ID: "1", Delay: 2147483647 * time.Second, TTR: 86400 * time.Second}},
		{"delay_ms replaces delay", `{"topic":"t","id":"1","delay":10,"delay_ms":1500,"ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", Delay: 1500 * time.Millisecond, TTR: time.Second}},
		{"delay_ms 0 replaces delay", `{"topic":"t","id":"1","delay":10,"delay_ms":0,"ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"delay_ms before delay still wins", `{"delay_ms":7,"topic":"t","id":"1","delay":10,"ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", Delay: 7 * time.Millisecond, TTR: time.Second}},
		{"null delay_ms is absent", `{"topic":"t","id":"1","delay":10,"delay_ms":null,"ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", Delay: 10 * time.Second, TTR: time.Second}},
		{"largest delay_ms", `{"topic":"t","id":"1","delay_ms":2147483647000,"ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", Delay: 2147483647 * time.Second, TTR: time.Second}},
		{"topic and id trimmed, body kept", `{"topic":"  t \t","id":"\n 1 ","ttr":1,"body":"  b \n"}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Body: "  b \n"}},
		{"missing body is empty", `{"topic":"t","id":"1","ttr":1}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"unicode", `{"topic":"commandes-é","id":"ид-1","ttr":1,"body":"héllo ✓ 😀"}`,
			delayqueue.Job{Topic: "commandes-é", ID: "ид-1", TTR: time.Second, Body: "héllo ✓ 😀"}},
		{"escapes and surrogate pairs", `{"topic":"t\u00e9","id":"1","ttr":1,"body":"\ud83d\ude00\u0000\"\\\/\n"}`,
			delayqueue.Job{Topic: "té", ID: "1", TTR: time.Second, Body: "😀\x00\"\\/\n"}},
		{"escaped backslash before u is no surrogate", `{"topic":"t","id":"1","ttr":1,"body":"\\ud800"}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Body: `\ud800`}},
		{"explicit replacement character is fine", `{"topic":"t","id":"1","ttr":1,"body":"\ufffd�"}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Body: "\ufffd\ufffd"}},
		{"body may contain commas and controls", `{"topic":"t","id":"1","ttr":1,"body":"a,b\u0001"}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Body: "a,b\x01"}},
		{"body at max_job_body_bytes", `{"topic":"t","id":"1","ttr":1,"body":"` + long(64) + `"}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Body: long(64)}},
		{"longest topic and id", `{"topic":"` + long(128) + `","id":"` + long(256) + `","ttr":1}`,
			delayqueue.Job{Topic: long(128), ID: long(256), TTR: time.Second}},
		{"unknown fields ignored", `{"topic":"t","id":"1","ttr":1,"extra":{"a":[1,2.5,"x"]},"priority":9.5}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"keys match case-insensitively like the original", `{"Topic":"t","ID":"1","TTR":5,"Delay":2}`,
			delayqueue.Job{Topic: "t", ID: "1", Delay: 2 * time.Second, TTR: 5 * time.Second}},
		{"repeated key: the last wins", `{"topic":"a","id":"1","ttr":1,"topic":"b"}`,
			delayqueue.Job{Topic: "b", ID: "1", TTR: time.Second}},
		{"whitespace around the object", " \r\n\t{\"topic\":\"t\",\"id\":\"1\",\"ttr\":1} \n",
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},

		// Lifecycle fields.
		{"retry schedule", `{"topic":"t","id":"1","ttr":30,"retry":[120,600,600,3600,7200,21600,54000]}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: 30 * time.Second, Retry: []int{120, 600, 600, 3600, 7200, 21600, 54000}}},
		{"retry extremes", `{"topic":"t","id":"1","ttr":1,"retry":[0, 2147483647 ,-0]}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Retry: []int{0, 2147483647, 0}}},
		{"retry with 100 entries", `{"topic":"t","id":"1","ttr":1,"retry":[` + strings.Repeat("5,", 99) + `5]}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Retry: repeatInt(5, 100)}},
		{"empty retry is no schedule", `{"topic":"t","id":"1","ttr":1,"retry":[]}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"null retry is no schedule", `{"topic":"t","id":"1","ttr":1,"retry":null}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"max_attempts", `{"topic":"t","id":"1","ttr":1,"max_attempts":3}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, MaxAttempts: 3}},
		{"max_attempts 0 is unlimited", `{"topic":"t","id":"1","ttr":1,"max_attempts":0}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"largest max_attempts with a schedule", `{"topic":"t","id":"1","ttr":1,"retry":[1],"max_attempts":10000}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Retry: []int{1}, MaxAttempts: 10000}},
		{"if_absent false is the default", `{"topic":"t","id":"1","ttr":1,"if_absent":false}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second}},
		{"lifecycle keys match case-insensitively", `{"topic":"t","id":"1","ttr":1,"Retry":[1],"Max_Attempts":2}`,
			delayqueue.Job{Topic: "t", ID: "1", TTR: time.Second, Retry: []int{1}, MaxAttempts: 2}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/push", tc.body)
			if resp.status != 200 || resp.code != 0 || resp.raw != `{"code":0,"message":"pushed","data":null}`+"\n" {
				t.Fatalf("answer %d %s", resp.status, resp.raw)
			}
			calls := q.recorded()
			if len(calls) != 1 || calls[0].op != "push" {
				t.Fatalf("calls = %+v, want one push", calls)
			}
			if !reflect.DeepEqual(calls[0].job, tc.want) {
				t.Fatalf("pushed %+v, want %+v", calls[0].job, tc.want)
			}
		})
	}
}

func TestPushRejects(t *testing.T) {
	t.Parallel()
	const valid = `"topic":"t","id":"1","ttr":1`
	tests := []struct {
		name string
		body string
		want string // the exact message
	}{
		// The body as a whole.
		{"empty body", ``, "request body is empty: send a JSON object"},
		{"blank body", " \n ", "request body is empty: send a JSON object"},
		{"null", `null`, "request body must be a JSON object, got null"},
		{"array", `[{"topic":"t","id":"1","ttr":1}]`, "request body must be a JSON object, got an array"},
		{"string", `"x"`, "request body must be a JSON object, got a string"},
		{"number", `12`, "request body must be a JSON object, got a number"},
		{"boolean", `true`, "request body must be a JSON object, got a boolean"},
		{"not JSON", `topic=t&id=1`, "request body is not valid JSON: invalid character 'o' in literal true (expecting 'r') (at byte 2)"},
		{"unclosed object", `{"topic":"t"`, "request body is not valid JSON: it ends too early"},
		{"missing value", `{"topic":}`, "request body is not valid JSON: invalid character '}' looking for beginning of value (at byte 10)"},
		{"trailing comma", `{"topic":"t",}`, "request body is not valid JSON: invalid character '}' looking for beginning of object key string (at byte 14)"},
		{"missing comma", `{"topic":"t" "id":"1"}`, "request body is not valid JSON: invalid character '\"' after object key:value pair (at byte 14)"},
		{"single quotes", `{'topic':'t'}`, "request body is not valid JSON: invalid character '\\'' looking for beginning of object key string (at byte 2)"},
		{"second object", `{` + valid + `}{}`, "request body has data after the JSON object"},
		{"trailing garbage", `{` + valid + `} x`, "request body has data after the JSON object"},
		{"trailing bracket", `{` + valid + `}]`, "request body has data after the JSON object"},
		{"invalid UTF-8 outside strings", "{\xff}", "request body is not valid JSON: invalid character 'ÿ' looking for beginning of object key string (at byte 2)"},

		// topic
		{"topic missing", `{"id":"1","ttr":1}`, "topic is required and must not be blank"},
		{"topic null", `{"topic":null,"id":"1","ttr":1}`, "topic is required and must not be blank"},
		{"topic empty", `{"topic":"","id":"1","ttr":1}`, "topic is required and must not be blank"},
		{"topic blank", `{"topic":" \t ","id":"1","ttr":1}`, "topic is required and must not be blank"},
		{"topic too long", `{"topic":"` + strings.Repeat("é", 65) + `","id":"1","ttr":1}`, "topic must be at most 128 bytes, got 130"},
		{"topic with comma", `{"topic":"a,b","id":"1","ttr":1}`, "topic must not contain a comma (commas separate topics in /pop)"},
		{"topic with tab inside", `{"topic":"a\tb","id":"1","ttr":1}`, "topic must not contain control characters"},
		{"topic with NUL", `{"topic":"a\u0000","id":"1","ttr":1}`, "topic must not contain control characters"},
		{"topic with DEL", `{"topic":"a\u007f","id":"1","ttr":1}`, "topic must not contain control characters"},
		{"topic with C1 control", `{"topic":"a\u0085b","id":"1","ttr":1}`, "topic must not contain control characters"},
		{"topic a number", `{"topic":5,"id":"1","ttr":1}`, "topic must be a string, got a number"},
		{"topic an array", `{"topic":["a"],"id":"1","ttr":1}`, "topic must be a string, got an array"},
		{"topic invalid UTF-8", "{\"topic\":\"a\xffb\",\"id\":\"1\",\"ttr\":1}", "topic must be valid UTF-8"},
		{"topic truncated UTF-8", "{\"topic\":\"a\xc3\",\"id\":\"1\",\"ttr\":1}", "topic must be valid UTF-8"},
		{"topic overlong UTF-8", "{\"topic\":\"\xc0\xaf\",\"id\":\"1\",\"ttr\":1}", "topic must be valid UTF-8"},
		{"topic encoded surrogate", "{\"topic\":\"\xed\xa0\x80\",\"id\":\"1\",\"ttr\":1}", "topic must be valid UTF-8"},
		{"topic lone high surrogate", `{"topic":"a\ud800","id":"1","ttr":1}`, "topic must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},
		{"topic lone low surrogate", `{"topic":"\uDC00a","id":"1","ttr":1}`, "topic must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},
		{"topic high then non-surrogate", `{"topic":"\ud800\u0041","id":"1","ttr":1}`, "topic must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},
		{"topic two highs", `{"topic":"\ud800\ud800","id":"1","ttr":1}`, "topic must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},
		{"topic reversed pair", `{"topic":"\ude00\ud83d","id":"1","ttr":1}`, "topic must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},

		// id
		{"id missing", `{"topic":"t","ttr":1}`, "id is required and must not be blank"},
		{"id blank", `{"topic":"t","id":"  ","ttr":1}`, "id is required and must not be blank"},
		{"id too long", `{"topic":"t","id":"` + strings.Repeat("x", 257) + `","ttr":1}`, "id must be at most 256 bytes, got 257"},
		{"id a number", `{"topic":"t","id":15,"ttr":1}`, "id must be a string, got a number"},
		{"id invalid UTF-8", "{\"topic\":\"t\",\"id\":\"\xfe\",\"ttr\":1}", "id must be valid UTF-8"},
		{"id lone surrogate", `{"topic":"t","id":"\udbff","ttr":1}`, "id must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},

		// body
		{"body a number", `{` + valid + `,"body":123}`, "body must be a string, got a number"},
		{"body an object", `{` + valid + `,"body":{"a":1}}`, "body must be a string, got an object"},
		{"body a boolean", `{` + valid + `,"body":false}`, "body must be a string, got a boolean"},
		{"body invalid UTF-8", "{" + valid + ",\"body\":\"ok \x80\"}", "body must be valid UTF-8"},
		{"body lone surrogate", `{` + valid + `,"body":"x\ud83d"}`, "body must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)"},
		{"body over max_job_body_bytes", `{` + valid + `,"body":"` + strings.Repeat("b", 65) + `"}`, "body must be at most 64 bytes (max_job_body_bytes), got 65 bytes"},

		// delay
		{"delay a string", `{` + valid + `,"delay":"10"}`, "delay must be an integer between 0 and 2147483647 (seconds), got a string"},
		{"delay a fraction", `{` + valid + `,"delay":10.5}`, "delay must be an integer between 0 and 2147483647 (seconds), got 10.5"},
		{"delay with .0", `{` + valid + `,"delay":10.0}`, "delay must be an integer between 0 and 2147483647 (seconds), got 10.0"},
		{"delay with exponent", `{` + valid + `,"delay":1e3}`, "delay must be an integer between 0 and 2147483647 (seconds), got 1e3"},
		{"delay negative", `{` + valid + `,"delay":-1}`, "delay must be an integer between 0 and 2147483647 (seconds), got -1"},
		{"delay 2^31", `{` + valid + `,"delay":2147483648}`, "delay must be an integer between 0 and 2147483647 (seconds), got 2147483648"},
		{"delay beyond int64", `{` + valid + `,"delay":99999999999999999999999}`, "delay must be an integer between 0 and 2147483647 (seconds), got 99999999999999999999999"},
		{"delay huge", `{` + valid + `,"delay":` + strings.Repeat("9", 1000) + `}`, "delay must be an integer between 0 and 2147483647 (seconds), got " + strings.Repeat("9", 40) + "…"},
		{"delay a boolean", `{` + valid + `,"delay":true}`, "delay must be an integer between 0 and 2147483647 (seconds), got a boolean"},
		{"delay invalid although delay_ms given", `{` + valid + `,"delay":"x","delay_ms":5}`, "delay must be an integer between 0 and 2147483647 (seconds), got a string"},

		// delay_ms
		{"delay_ms negative", `{` + valid + `,"delay_ms":-1}`, "delay_ms must be an integer between 0 and 2147483647000 (milliseconds), got -1"},
		{"delay_ms too large", `{` + valid + `,"delay_ms":2147483647001}`, "delay_ms must be an integer between 0 and 2147483647000 (milliseconds), got 2147483647001"},
		{"delay_ms a fraction", `{` + valid + `,"delay_ms":1.5}`, "delay_ms must be an integer between 0 and 2147483647000 (milliseconds), got 1.5"},
		{"delay_ms a string", `{` + valid + `,"delay_ms":"1500"}`, "delay_ms must be an integer between 0 and 2147483647000 (milliseconds), got a string"},

		// ttr
		{"ttr missing", `{"topic":"t","id":"1"}`, "ttr is required: an integer between 1 and 86400 (seconds)"},
		{"ttr null", `{"topic":"t","id":"1","ttr":null}`, "ttr is required: an integer between 1 and 86400 (seconds)"},
		{"ttr 0", `{"topic":"t","id":"1","ttr":0}`, "ttr must be an integer between 1 and 86400 (seconds), got 0"},
		{"ttr over a day", `{"topic":"t","id":"1","ttr":86401}`, "ttr must be an integer between 1 and 86400 (seconds), got 86401"},
		{"ttr a string", `{"topic":"t","id":"1","ttr":"30"}`, "ttr must be an integer between 1 and 86400 (seconds), got a string"},
		{"ttr a fraction", `{"topic":"t","id":"1","ttr":30.5}`, "ttr must be an integer between 1 and 86400 (seconds), got 30.5"},
		{"ttr an array", `{"topic":"t","id":"1","ttr":[30]}`, "ttr must be an integer between 1 and 86400 (seconds), got an array"},

		// retry
		{"retry a number", `{` + valid + `,"retry":60}`, "retry must be an array of integers (seconds), got a number"},
		{"retry a string", `{` + valid + `,"retry":"60,120"}`, "retry must be an array of integers (seconds), got a string"},
		{"retry an object", `{` + valid + `,"retry":{"0":60}}`, "retry must be an array of integers (seconds), got an object"},
		{"retry with 101 entries", `{` + valid + `,"retry":[` + strings.Repeat("1,", 100) + `1]}`, "retry must hold 0 to 100 integers (seconds), got 101"},
		{"retry entry negative", `{` + valid + `,"retry":[1,-1]}`, "retry[1] must be an integer between 0 and 2147483647 (seconds), got -1"},
		{"retry entry 2^31", `{` + valid + `,"retry":[2147483648]}`, "retry[0] must be an integer between 0 and 2147483647 (seconds), got 2147483648"},
		{"retry entry a fraction", `{` + valid + `,"retry":[1.5]}`, "retry[0] must be an integer between 0 and 2147483647 (seconds), got 1.5"},
		{"retry entry with exponent", `{` + valid + `,"retry":[1e2]}`, "retry[0] must be an integer between 0 and 2147483647 (seconds), got 1e2"},
		{"retry entry a string", `{` + valid + `,"retry":[1,2,"3"]}`, "retry[2] must be an integer between 0 and 2147483647 (seconds), got a string"},
		{"retry entry null", `{` + valid + `,"retry":[null]}`, "retry[0] must be an integer between 0 and 2147483647 (seconds), got null"},
		{"retry entry an array", `{` + valid + `,"retry":[[1]]}`, "retry[0] must be an integer between 0 and 2147483647 (seconds), got an array"},

		// max_attempts
		{"max_attempts negative", `{` + valid + `,"max_attempts":-1}`, "max_attempts must be an integer between 0 and 10000 (0 is unlimited), got -1"},
		{"max_attempts too large", `{` + valid + `,"max_attempts":10001}`, "max_attempts must be an integer between 0 and 10000 (0 is unlimited), got 10001"},
		{"max_attempts a string", `{` + valid + `,"max_attempts":"3"}`, "max_attempts must be an integer between 0 and 10000 (0 is unlimited), got a string"},
		{"max_attempts a fraction", `{` + valid + `,"max_attempts":2.5}`, "max_attempts must be an integer between 0 and 10000 (0 is unlimited), got 2.5"},

		// if_absent
		{"if_absent a string", `{` + valid + `,"if_absent":"true"}`, "if_absent must be true or false, got a string"},
		{"if_absent a number", `{` + valid + `,"if_absent":1}`, "if_absent must be true or false, got a number"},

		// callback
		{"callback not an object", `{` + valid + `,"callback":"http://x/"}`, "callback must be a JSON object with a url, got a string"},
		{"callback without url", `{` + valid + `,"callback":{}}`, "callback.url is required: an http or https URL"},
		{"callback url not http", `{` + valid + `,"callback":{"url":"ftp://x/"}}`, "callback.url must be an absolute http or https URL"},
		{"callback url relative", `{` + valid + `,"callback":{"url":"/hook"}}`, "callback.url must be an absolute http or https URL"},
		{"callback method GET", `{` + valid + `,"callback":{"url":"http://x/","method":"get"}}`, "callback.method must be POST, PUT or PATCH"},
		{"callback timeout too long", `{` + valid + `,"callback":{"url":"http://x/","timeout":301}}`, "callback.timeout must be an integer between 1 and 300 (seconds), got 301"},
		{"callback header reserved", `{` + valid + `,"callback":{"url":"http://x/","headers":{"X-DelayQueue-Id":"1"}}}`, "callback.headers may not set X-DelayQueue-Id"},
		{"callback header host", `{` + valid + `,"callback":{"url":"http://x/","headers":{"host":"y"}}}`, "callback.headers may not set host"},
		{"callback header not a string", `{` + valid + `,"callback":{"url":"http://x/","headers":{"A":1}}}`, "callback.headers.A must be a string, got a number"},
		{"callback headers not an object", `{` + valid + `,"callback":{"url":"http://x/","headers":["A"]}}`, "callback.headers must be an object of strings, got an array"},
		{"callback follow_redirects a string", `{` + valid + `,"callback":{"url":"http://x/","follow_redirects":"yes"}}`, "callback.follow_redirects must be true or false, got a string"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/push", tc.body)
			if resp.status != 200 || resp.code != 1 || string(resp.data) != "null" {
				t.Fatalf("answer %d %s, want 200 with code 1", resp.status, resp.raw)
			}
			if resp.msg != tc.want {
				t.Errorf("message\n got %q\nwant %q", resp.msg, tc.want)
			}
			if calls := q.recorded(); len(calls) != 0 {
				t.Errorf("queue called for an invalid request: %+v", calls)
			}
		})
	}
}

func TestPushReplacedMessage(t *testing.T) {
	t.Parallel()
	q := &fakeQueue{pushResult: delayqueue.PushResult{Status: delayqueue.PushReplaced}}
	resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/push", `{"topic":"t","id":"1","ttr":1}`)
	if want := `{"code":0,"message":"pushed, replacing the job with the same id","data":null}` + "\n"; resp.raw != want {
		t.Fatalf("answer %s, want %s", resp.raw, want)
	}
}

func repeatInt(n, times int) []int {
	s := make([]int, times)
	for i := range s {
		s[i] = n
	}
	return s
}

// if_absent: data says whether the job existed; without it data stays null.
func TestPushIfAbsentAnswers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		body   string
		status delayqueue.PushStatus
		want   string
	}{
		{"absent: pushed", `{"topic":"t","id":"1","ttr":1,"if_absent":true}`, delayqueue.PushCreated,
			`{"code":0,"message":"pushed","data":{"exists":false}}`},
		{"exists: left alone", `{"topic":"t","id":"1","ttr":1,"if_absent":true}`, delayqueue.PushExists,
			`{"code":0,"message":"not pushed: a job with this id exists (if_absent)","data":{"exists":true}}`},
		{"if_absent false replaces as before", `{"topic":"t","id":"1","ttr":1,"if_absent":false}`, delayqueue.PushReplaced,
			`{"code":0,"message":"pushed, replacing the job with the same id","data":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{pushResult: delayqueue.PushResult{Status: tc.status}}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/push", tc.body)
			if resp.raw != tc.want+"\n" {
				t.Fatalf("answer %s\nwant   %s", resp.raw, tc.want)
			}
			calls := q.recorded()
			if len(calls) != 1 || calls[0].op != "push" || calls[0].job.IfAbsent != strings.Contains(tc.body, "true") {
				t.Fatalf("calls = %+v", calls)
			}
		})
	}
}

func TestPushBatchAccepts(t *testing.T) {
	t.Parallel()
	q := &fakeQueue{pushResults: []delayqueue.PushResult{
		{Status: delayqueue.PushCreated}, {Status: delayqueue.PushReplaced}, {Status: delayqueue.PushExists},
	}}
	body := `{"jobs":[
		{"topic":"a","id":"1","ttr":1},
		{"topic":" b ","id":" 2 ","delay_ms":1500,"ttr":30,"body":"x","retry":[60],"max_attempts":3},
		{"topic":"a","id":"3","ttr":1,"if_absent":true,"unknown":5}
	]}`
	resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/push", body)
	want := `{"code":0,"message":"pushed 3 jobs","data":[{"id":"1","status":"created"},{"id":"2","status":"replaced"},{"id":"3","status":"exists"}]}`
	if resp.raw != want+"\n" {
		t.Fatalf("answer %s\nwant   %s", resp.raw, want)
	}
	calls := q.recorded()
	if len(calls) != 1 || calls[0].op != "pushBatch" {
		t.Fatalf("calls = %+v, want one pushBatch", calls)
	}
	wantJobs := []delayqueue.Job{
		{Topic: "a", ID: "1", TTR: time.Second},
		{Topic: "b", ID: "2", Delay: 1500 * time.Millisecond, TTR: 30 * time.Second, Body: "x", Retry: []int{60}, MaxAttempts: 3},
		{Topic: "a", ID: "3", TTR: time.Second, IfAbsent: true},
	}
	if !reflect.DeepEqual(calls[0].jobs, wantJobs) {
		t.Fatalf("pushed %+v\nwant   %+v", calls[0].jobs, wantJobs)
	}

	// A batch of one still answers with an array; 1000 jobs are allowed.
	for _, n := range []int{1, 1000} {
		jobs := make([]string, n)
		for i := range jobs {
			jobs[i] = fmt.Sprintf(`{"topic":"t","id":"j%d","ttr":1}`, i)
		}
		q := &fakeQueue{}
		opts := testOptions()
		opts.MaxBodyBytes = 1 << 20
		resp := serve(t, New(q, opts, redistest.Logger(t)), "POST", "/push", `{"jobs":[`+strings.Join(jobs, ",")+`]}`)
		var pushed []wire.PushResult
		if err := json.Unmarshal(resp.data, &pushed); resp.code != 0 || err != nil || len(pushed) != n || pushed[n-1].ID != fmt.Sprintf("j%d", n-1) {
			t.Fatalf("batch of %d: answer %.300s", n, resp.raw)
		}
		if calls := q.recorded(); len(calls) != 1 || len(calls[0].jobs) != n {
			t.Fatalf("batch of %d: %d calls", n, len(calls))
		}
	}
}

func TestPushBatchRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		body     string
		wantMsg  string
		wantData string // "null" for a failure of the whole request
	}{
		{"jobs not an array", `{"jobs":{"topic":"t"}}`, "jobs must be an array of jobs, got an object", "null"},
		{"jobs a string", `{"jobs":"x"}`, "jobs must be an array of jobs, got a string", "null"},
		{"jobs empty", `{"jobs":[]}`, "jobs must hold 1 to 1000 jobs, got 0", "null"},
		{"jobs with single-job fields", `{"jobs":[{"topic":"t","id":"1","ttr":1}],"topic":"t","ttr":1}`,
			"use either jobs (a batch) or a single job's fields, not both: got jobs and topic, ttr", "null"},
		{"jobs with if_absent beside", `{"jobs":[{"topic":"t","id":"1","ttr":1}],"if_absent":true}`,
			"use either jobs (a batch) or a single job's fields, not both: got jobs and if_absent", "null"},
		{"one bad job", `{"jobs":[{"topic":"t","id":"1","ttr":1},{"topic":"t","id":"2"}]}`,
			"1 of 2 jobs is invalid",
			`[{"index":1,"id":"2","message":"ttr is required: an integer between 1 and 86400 (seconds)"}]`},
		{"every kind of bad job", `{"jobs":[
			{"topic":"t","id":"ok","ttr":1},
			5,
			null,
			{"topic":"t","id":" x ","ttr":1,"retry":[-1]},
			{"topic":"t","id":7,"ttr":1},
			{"topic":"a,b","id":"y","ttr":1},
			{"topic":"t","id":"ok","ttr":2},
			{"topic":"t","id":"x","ttr":1},
			{"topic":"t","id":"z","ttr":1,"jobs":[5]},
			{"topic":"t","id":"b","ttr":1,"body":"` + strings.Repeat("b", 65) + `"}
		]}`,
			"8 of 10 jobs are invalid",
			`[{"index":1,"id":"","message":"a job must be a JSON object, got a number"},` +
				`{"index":2,"id":"","message":"a job must be a JSON object, got null"},` +
				`{"index":3,"id":"x","message":"retry[0] must be an integer between 0 and 2147483647 (seconds), got -1"},` +
				`{"index":4,"id":"","message":"id must be a string, got a number"},` +
				`{"index":5,"id":"y","message":"topic must not contain a comma (commas separate topics in /pop)"},` +
				`{"index":6,"id":"ok","message":"id \"ok\" is already used by job 0 of the batch"},` +
				`{"index":7,"id":"x","message":"id \"x\" is already used by job 3 of the batch"},` +
				`{"index":9,"id":"b","message":"body must be at most 64 bytes (max_job_body_bytes), got 65 bytes"}]`},
		{"an invalid id is not echoed", `{"jobs":[{"topic":"t","id":"` + strings.Repeat("i", 257) + `","ttr":1},{"topic":"t","id":" ","ttr":1}]}`,
			"2 of 2 jobs are invalid", `[{"index":0,"id":"","message":"id must be at most 256 bytes, got 257"},` +
				`{"index":1,"id":"","message":"id is required and must not be blank"}]`},
		{"a bad job's id still counts for repeats", `{"jobs":[{"topic":"t","id":"1"},{"topic":"t","id":"1","ttr":1}]}`,
			"2 of 2 jobs are invalid", `[{"index":0,"id":"1","message":"ttr is required: an integer between 1 and 86400 (seconds)"},` +
				`{"index":1,"id":"1","message":"id \"1\" is already used by job 0 of the batch"}]`},
		{"duplicate after trimming", `{"jobs":[{"topic":"t","id":"1","ttr":1},{"topic":"t","id":" 1","ttr":1}]}`,
			"1 of 2 jobs is invalid", `[{"index":1,"id":"1","message":"id \"1\" is already used by job 0 of the batch"}]`},
		{"invalid UTF-8 in a job", "{\"jobs\":[{\"topic\":\"t\",\"id\":\"1\",\"ttr\":1,\"body\":\"\xff\"}]}",
			"1 of 1 jobs is invalid", `[{"index":0,"id":"1","message":"body must be valid UTF-8"}]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), redistest.Logger(t)), "POST", "/push", tc.body)
			if resp.status != 200 || resp.code != 1 || resp.msg != tc.wantMsg {
				t.Fatalf("answer %d %s\nwant code 1 %q", resp.status, resp.raw, tc.wantMsg)
			}
			if string(resp.data) != tc.wantData {
				t.Errorf("data\n got %s\nwant %s", resp.data, tc.wantData)
			}
			if calls := q.recorded(); len(calls) != 0 {
				t.Errorf("queue called for an invalid batch: %+v", calls)
			}
		})
	}

	t.Run("1001 jobs", func(t *testing.T) {
		q := &fakeQueue{}
		opts := testOptions()
		opts.MaxBodyBytes = 1 << 20
		body := `{"jobs":[` + strings.Repeat(`{"topic":"t","id":"1","ttr":1},`, 1000) + `{"topic":"t","id":"1","ttr":1}]}`
		resp := serve(t, New(q, opts, redistest.Logger(t)), "POST", "/push", body)
		if resp.code != 1 || resp.msg != "jobs must hold 1 to 1000 jobs, got 1001" || len(q.recorded()) != 0 {
			t.Fatalf("answer %s", resp.raw)
		}
	})
}

// The engine's answer is checked, not trusted blindly.
func TestPushBatchEngineAnswers(t *testing.T) {
	t.Parallel()
	body := `{"jobs":[{"topic":"t","id":"1","ttr":1},{"topic":"t","id":"2","ttr":1}]}`
	tests := []struct {
		name string
		q    *fakeQueue
		want string
	}{
		{"redis down", &fakeQueue{err: delayqueue.ErrUnavailable}, `{"code":1,"message":"redis unavailable, try again","data":null}`},
		{"starting", &fakeQueue{err: fmt.Errorf("push: %w", delayqueue.ErrStarting)},
			`{"code":1,"message":"server is starting (moving jobs to the current layout), try again","data":null}`},
		{"engine refuses", &fakeQueue{err: fmt.Errorf("push: job 1: %w: id too long", delayqueue.ErrInvalidJob)},
			`{"code":1,"message":"push: job 1: invalid job: id too long","data":null}`},
		{"wrong number of results", &fakeQueue{pushResults: []delayqueue.PushResult{{}}},
			`{"code":1,"message":"internal error","data":null}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp := serve(t, New(tc.q, testOptions(), redistest.Logger(t)), "POST", "/push", body)
			if resp.raw != tc.want+"\n" {
				t.Fatalf("answer %s\nwant   %s", resp.raw, tc.want)
			}
		})
	}
}
