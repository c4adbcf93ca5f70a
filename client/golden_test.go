package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
)

// updateGolden rewrites testdata/exchanges.golden from what the client does:
// go test ./client/ -run TestExchangesGolden -update. Only for a deliberate
// change; the diff is the change.
var updateGolden = flag.Bool("update", false, "rewrite testdata/exchanges.golden")

// serverAnswers holds the server's golden answers (routers' TestAnswersGolden
// checks that the server writes exactly these), so that the client is
// tested on the bytes the server writes.
const serverAnswers = "../routers/testdata/answers"

// serverAnswer reads a golden answer of the server: its status and body.
func serverAnswer(t *testing.T, name string) (int, []byte) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(serverAnswers, name+".golden"))
	if err != nil {
		t.Fatal(err)
	}
	// The file is the request line, "HTTP <status>", then the body.
	_, rest, _ := bytes.Cut(raw, []byte("\n"))
	statusLine, body, _ := bytes.Cut(rest, []byte("\n"))
	status, err := strconv.Atoi(strings.TrimPrefix(string(statusLine), "HTTP "))
	if err != nil {
		t.Fatalf("%s: status line %q", name, statusLine)
	}
	return status, body
}

// exchange is one method call: what the client sends, and what it makes of
// a golden answer of the server.
type exchange struct {
	name   string
	answer string // the server's golden answer, in routers/testdata/answers
	call   func(ctx context.Context, c *client.Client) (any, error)
}

func exchanges() []exchange {
	push := client.PushJob{Topic: "mail", ID: "j1", Delay: 1500 * time.Millisecond, TTR: 30 * time.Second, Body: "hello <&>",
		Retry: []time.Duration{10 * time.Second, time.Minute + 1}, MaxAttempts: 5}
	ifAbsent := client.PushJob{Topic: "mail", ID: "j1", Delay: 2 * time.Second, TTR: 1500 * time.Millisecond, IfAbsent: true}
	batch := []client.PushJob{{Topic: "mail", ID: "a", TTR: 30 * time.Second}, push, ifAbsent}
	one := func(f func(ctx context.Context, c *client.Client) error) func(ctx context.Context, c *client.Client) (any, error) {
		return func(ctx context.Context, c *client.Client) (any, error) { return nil, f(ctx, c) }
	}
	return []exchange{
		{"Push", "push", func(ctx context.Context, c *client.Client) (any, error) { return c.Push(ctx, push) }},
		{"Push replacing", "push-replaced", func(ctx context.Context, c *client.Client) (any, error) { return c.Push(ctx, push) }},
		{"Push if absent, new", "push-if-absent-new", func(ctx context.Context, c *client.Client) (any, error) { return c.Push(ctx, ifAbsent) }},
		{"Push if absent, exists", "push-if-absent-exists", func(ctx context.Context, c *client.Client) (any, error) { return c.Push(ctx, ifAbsent) }},
		{"PushBatch", "push-batch", func(ctx context.Context, c *client.Client) (any, error) { return c.PushBatch(ctx, batch) }},
		{"PushBatch rejected", "push-batch-invalid", func(ctx context.Context, c *client.Client) (any, error) {
			results, err := c.PushBatch(ctx, batch)
			return []any{results, client.InvalidJobs(err)}, err
		}},
		{"PushBatch in part", "push-batch-partial", func(ctx context.Context, c *client.Client) (any, error) { return c.PushBatch(ctx, batch) }},

		{"Pop", "pop", func(ctx context.Context, c *client.Client) (any, error) {
			return c.Pop(ctx, []string{"mail", "sms"}, 1500*time.Millisecond)
		}},
		{"Pop escaped", "pop-escaped", func(ctx context.Context, c *client.Client) (any, error) { return c.Pop(ctx, []string{"mail"}, 0) }},
		{"Pop empty", "pop-empty", func(ctx context.Context, c *client.Client) (any, error) {
			return c.Pop(ctx, []string{"mail"}, time.Second)
		}},
		{"PopN", "pop-count", func(ctx context.Context, c *client.Client) (any, error) {
			return c.PopN(ctx, []string{"mail"}, 2, time.Second)
		}},
		{"PopN empty", "pop-count-empty", func(ctx context.Context, c *client.Client) (any, error) { return c.PopN(ctx, []string{"mail"}, 2, 0) }},

		{"Finish", "finish", one(func(ctx context.Context, c *client.Client) error { return c.Finish(ctx, "j1") })},
		{"FinishDelivery", "finish", one(func(ctx context.Context, c *client.Client) error { return c.FinishDelivery(ctx, "j1", 2) })},
		{"FinishDelivery without receipt", "finish", one(func(ctx context.Context, c *client.Client) error { return c.FinishDelivery(ctx, "j1", 0) })},
		{"FinishIDs", "finish-ids", func(ctx context.Context, c *client.Client) (any, error) { return c.FinishIDs(ctx, []string{"a", "b"}) }},
		{"FinishIDs dead", "finish-ids-dead", func(ctx context.Context, c *client.Client) (any, error) {
			return c.FinishIDs(ctx, []string{"a", "b", "c"})
		}},
		{"FinishIDs in part", "finish-ids-partial", func(ctx context.Context, c *client.Client) (any, error) {
			return c.FinishIDs(ctx, []string{"a", "b", "c", "d"})
		}},
		{"Delete", "delete", one(func(ctx context.Context, c *client.Client) error { return c.Delete(ctx, "j1") })},
		{"DeleteIDs", "delete-ids", func(ctx context.Context, c *client.Client) (any, error) {
			return c.DeleteIDs(ctx, []string{"a", "b", "c"})
		}},
		{"DeleteIDs in part", "delete-ids-partial", func(ctx context.Context, c *client.Client) (any, error) {
			return c.DeleteIDs(ctx, []string{"a", "b", "c"})
		}},

		{"Get unknown", "get-unknown", func(ctx context.Context, c *client.Client) (any, error) { return c.Get(ctx, "j1") }},
		{"Get delay", "get-delay", func(ctx context.Context, c *client.Client) (any, error) { return c.Get(ctx, "j1") }},
		{"Get times unknown", "get-times-unknown", func(ctx context.Context, c *client.Client) (any, error) { return c.Get(ctx, "j1") }},
		{"Get reserved", "get-reserved", func(ctx context.Context, c *client.Client) (any, error) { return c.Get(ctx, "j1") }},
		{"Get dead", "get-dead", func(ctx context.Context, c *client.Client) (any, error) { return c.Get(ctx, "j1") }},
		{"Get callback", "get-callback", func(ctx context.Context, c *client.Client) (any, error) { return c.Get(ctx, "j1") }},

		{"Release", "release", func(ctx context.Context, c *client.Client) (any, error) {
			return c.Release(ctx, "j1", client.ReleaseOptions{})
		}},
		{"Release with options", "release-dead", func(ctx context.Context, c *client.Client) (any, error) {
			return c.Release(ctx, "j1", client.ReleaseOptions{Delay: new(1500 * time.Millisecond), Attempt: 2})
		}},
		{"Release now", "release", func(ctx context.Context, c *client.Client) (any, error) {
			return c.Release(ctx, "j1", client.ReleaseOptions{Delay: new(time.Duration(0))})
		}},
		{"Touch", "touch", func(ctx context.Context, c *client.Client) (any, error) { return c.Touch(ctx, "j1", 2) }},
		{"Touch without receipt", "touch", func(ctx context.Context, c *client.Client) (any, error) { return c.Touch(ctx, "j1", 0) }},

		{"Stats", "stats", func(ctx context.Context, c *client.Client) (any, error) { return c.Stats(ctx, "") }},
		{"Stats of a topic", "stats-empty", func(ctx context.Context, c *client.Client) (any, error) { return c.Stats(ctx, "mail") }},
		{"Topics", "topics", func(ctx context.Context, c *client.Client) (any, error) { return c.Topics(ctx) }},
		{"Topics empty", "topics-empty", func(ctx context.Context, c *client.Client) (any, error) { return c.Topics(ctx) }},

		{"DeadList", "dead-list", func(ctx context.Context, c *client.Client) (any, error) { return c.DeadList(ctx, "mail", 0, 0) }},
		{"DeadList paged", "dead-list-empty", func(ctx context.Context, c *client.Client) (any, error) { return c.DeadList(ctx, "mail", 10, 5) }},
		{"DeadKick", "dead-kick-none", func(ctx context.Context, c *client.Client) (any, error) { return c.DeadKick(ctx, "mail", "x") }},
		{"DeadKickOldest", "dead-kick", func(ctx context.Context, c *client.Client) (any, error) { return c.DeadKickOldest(ctx, "mail", 2) }},
		{"DeadDelete", "dead-delete", func(ctx context.Context, c *client.Client) (any, error) { return c.DeadDelete(ctx, "mail", "x") }},
		{"DeadDeleteAll", "dead-delete", func(ctx context.Context, c *client.Client) (any, error) { return c.DeadDeleteAll(ctx, "mail") }},

		{"refused", "fail-not-found", func(ctx context.Context, c *client.Client) (any, error) {
			return c.Release(ctx, "j1", client.ReleaseOptions{})
		}},
		{"unknown path", "fail-unknown-path", func(ctx context.Context, c *client.Client) (any, error) {
			var data json.RawMessage
			err := c.Call(ctx, "/nope", struct{}{}, &data)
			return data, err
		}},
	}
}

// TestExchangesGolden checks, for every method, the exact bytes the client
// sends, what it makes of the server's golden answer (values and errors),
// and how the values it returns marshal to JSON (dqctl prints them), against
// what the client did before the wire types had a package of their own.
func TestExchangesGolden(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	var status int
	var answer []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, r.Method+" "+r.URL.Path+" "+string(body))
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(status)
		_, _ = w.Write(answer)
	}))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL)

	var out bytes.Buffer
	for _, ex := range exchanges() {
		mu.Lock()
		status, answer = serverAnswer(t, ex.answer)
		sent = nil
		mu.Unlock()
		value, err := ex.call(context.Background(), c)
		mu.Lock()
		requests := slices.Clone(sent)
		mu.Unlock()
		marshalled, marshalErr := json.Marshal(value)
		if marshalErr != nil {
			marshalled = []byte(marshalErr.Error())
		}
		fmt.Fprintf(&out, "== %s (answer %s)\nsent: %s\nvalue: %s\njson: %s\nerror: %s\n\n",
			ex.name, ex.answer, strings.Join(requests, "\n      "), describe(reflect.ValueOf(value)), marshalled, describeErr(err))
	}

	// PushJob also reads the API's /push objects, such as the lines of a
	// file dqctl pushes.
	for _, line := range []string{
		`{"topic":"mail","id":"j1","delay":5,"ttr":30,"body":"b","retry":[1,60],"max_attempts":3,"if_absent":true}`,
		`{"topic":"mail","id":"j1","delay":5,"delay_ms":1500,"ttr":30}`,
		`{"topic":"mail","id":"j1","ttr":30,"delay":1.5}`,
		`{"topic":"mail","id":"j1","ttr":30,"retry":null,"unknown":1}`,
		`{"topic":"mail","id":"h1","delay":60,"body":"b","callback":{"url":"http://127.0.0.1:9/hook","method":"PUT","headers":{"X-A":"1"},"timeout":5,"follow_redirects":true}}`,
	} {
		var job client.PushJob
		err := json.Unmarshal([]byte(line), &job)
		marshalled, _ := json.Marshal(job)
		fmt.Fprintf(&out, "== PushJob from %s\nvalue: %s\njson: %s\nerror: %s\n\n", line, describe(reflect.ValueOf(job)), marshalled, describeErr(err))
	}

	file := filepath.Join("testdata", "exchanges.golden")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	golden, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to write it)", err)
	}
	if !bytes.Equal(out.Bytes(), golden) {
		gotLines, wantLines := strings.Split(out.String(), "\n"), strings.Split(string(golden), "\n")
		for i := range max(len(gotLines), len(wantLines)) {
			var got, want string
			if i < len(gotLines) {
				got = gotLines[i]
			}
			if i < len(wantLines) {
				want = wantLines[i]
			}
			if got != want {
				t.Errorf("%s line %d differs:\n got: %s\nwant: %s", file, i+1, got, want)
			}
		}
	}
}

// describeErr prints an error with the fields a caller can read.
func describeErr(err error) string {
	var partial *client.PartialBatchError
	var apiErr *client.APIError
	switch {
	case err == nil:
		return "none"
	case errors.As(err, &partial):
		return fmt.Sprintf("%T %q %s failed %s", err, err.Error(), describe(reflect.ValueOf(partial.Results)),
			describe(reflect.ValueOf(partial.Failed())))
	case errors.As(err, &apiErr):
		return fmt.Sprintf("%T %q code %d status %d data %s", err, err.Error(), apiErr.Code, apiErr.HTTPStatus, apiErr.Data)
	}
	return fmt.Sprintf("%T %q", err, err.Error())
}

// describe prints a value whatever the time zone: times in UTC, durations
// as such, maps in key order, nil apart from empty; not the names of the
// types, which are not on the wire.
func describe(v reflect.Value) string {
	if !v.IsValid() {
		return "<nil>"
	}
	if !v.CanInterface() {
		return fmt.Sprint(v)
	}
	switch x := v.Interface().(type) {
	case time.Time:
		if x.IsZero() {
			return "zero-time"
		}
		return x.UTC().Format(time.RFC3339Nano)
	case time.Duration:
		return x.String()
	case json.RawMessage:
		return fmt.Sprintf("raw(%s)", x)
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "nil"
		}
		return "&" + describe(v.Elem())
	case reflect.Struct:
		parts := make([]string, v.NumField())
		for i := range v.NumField() {
			parts[i] = v.Type().Field(i).Name + ":" + describe(v.Field(i))
		}
		return "{" + strings.Join(parts, " ") + "}"
	case reflect.Slice:
		if v.IsNil() {
			return "nil-slice"
		}
		parts := make([]string, v.Len())
		for i := range v.Len() {
			parts[i] = describe(v.Index(i))
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case reflect.Map:
		if v.IsNil() {
			return "nil-map"
		}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(fmt.Sprint(a), fmt.Sprint(b)) })
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = describe(k) + ":" + describe(v.MapIndex(k))
		}
		return "map[" + strings.Join(parts, " ") + "]"
	case reflect.String:
		return strconv.Quote(v.String())
	}
	return fmt.Sprint(v.Interface())
}
