package routers

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
)

func TestPushAccepts(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	tests := []struct {
		name string
		body string
		want delayqueue.Job
	}{
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), testLogger(t)), "POST", "/push", tc.body)
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := &fakeQueue{}
			resp := serve(t, New(q, testOptions(), testLogger(t)), "POST", "/push", tc.body)
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
	q := &fakeQueue{pushResult: delayqueue.PushResult{Status: delayqueue.PushReplaced}}
	resp := serve(t, New(q, testOptions(), testLogger(t)), "POST", "/push", `{"topic":"t","id":"1","ttr":1}`)
	if want := `{"code":0,"message":"pushed, replacing the job with the same id","data":null}` + "\n"; resp.raw != want {
		t.Fatalf("answer %s, want %s", resp.raw, want)
	}
}
