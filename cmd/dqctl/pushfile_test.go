package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
	"github.com/delay-queue/delay-queue/routers"
	"github.com/delay-queue/delay-queue/wire"
)

// writeLines writes a JSON-lines file and returns its path.
func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func jobLine(id, body string) string {
	return fmt.Sprintf(`{"topic":"bulk","id":%q,"delay":3600,"ttr":30,"body":%q}`, id, body)
}

func TestPushFile(t *testing.T) {
	url := startServer(t)
	c := client.New(url)
	path := writeLines(t,
		jobLine("j1", "one"),
		jobLine("j2", "two"),
		`{"topic":"bulk","id":"j3",`, // line 3: malformed
		"",                           // blank: skipped, not counted
		jobLine("j2", "two again"),   // line 5: same id as line 2, same batch: replaces it
		`["not","an","object"]`,      // line 6
		`{"topic":"bulk","id":"bad-ttr","ttr":0}`, // line 7: the server refuses it
		jobLine("j8", "eight"),
		`{"topic":"bulk","id":"frac","ttr":1.5}`, // line 9: not an integer
		jobLine("j10", "ten"),
		`{"topic":"bu,lk","id":"comma","ttr":5}`, // line 11: the server refuses it
		jobLine("j12", "twelve"),
	)
	r := dq(t, url, "push", "--file", path, "--batch", "3")
	if r.code != exitFailure {
		t.Fatalf("exit %d, want 1 (some lines failed)\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r.stderr != "" {
		t.Errorf("stderr is not a terminal, yet got %q", r.stderr)
	}
	wantContains(t, "summary", r.stdout,
		"pushed 6, failed 5 (12 lines in",
		"line 3: malformed JSON",
		"line 6: not a JSON object",
		"line 7 (id bad-ttr): ttr must be",
		"line 9: malformed JSON",
		"line 11 (id comma): topic must not contain a comma")
	if strings.Index(r.stdout, "line 3:") > strings.Index(r.stdout, "line 11 ") {
		t.Errorf("errors not in line order:\n%s", r.stdout)
	}

	ctx := context.Background()
	stats, err := c.Stats(ctx, "bulk")
	if err != nil || stats["bulk"].Delay != 5 {
		t.Fatalf("stats = %+v, %v; want 5 delayed jobs (6 lines, one id twice)", stats, err)
	}
	if info, err := c.Get(ctx, "j2"); err != nil || info == nil || info.Body != "two again" {
		t.Errorf("j2 = %+v, %v; want the later line's body", info, err)
	}
	for _, id := range []string{"j3", "bad-ttr", "frac", "comma"} {
		if info, err := c.Get(ctx, id); err != nil || info != nil {
			t.Errorf("failed line's job %s stored: %+v, %v", id, info, err)
		}
	}

	r = dq(t, url, "push", "--json", "--file", path)
	var summary pushSummary
	decodeJSON(t, r.stdout, &summary)
	if r.code != exitFailure || summary.Pushed != 6 || summary.Failed != 5 || len(summary.Errors) != 5 ||
		summary.Errors[0].Line != 3 || summary.Errors[2] != (lineError{7, "bad-ttr", "ttr must be an integer between 1 and 86400 (seconds), got 0"}) {
		t.Errorf("push --file --json: exit %d, %+v", r.code, summary)
	}
}

func TestPushFileLimits(t *testing.T) {
	t.Run("clean file exits 0", func(t *testing.T) {
		url := startServer(t)
		var lines []string
		for i := range 1234 {
			lines = append(lines, jobLine(fmt.Sprintf("k%d", i), "body"))
		}
		r := dq(t, url, "push", "--file", writeLines(t, lines...))
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "pushed 1234, failed 0 (1234 lines in") {
			t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
	})

	t.Run("a batch over the body limit is retried job by job", func(t *testing.T) {
		url := startServerWith(t, routers.Options{BlockTimeout: 5 * time.Second, MaxBodyBytes: 600})
		big := strings.Repeat("x", 700)
		path := writeLines(t, jobLine("s1", "small"), jobLine("s2", big), jobLine("s3", "small"), jobLine("s4", "small"))
		r := dq(t, url, "push", "--file", path)
		if r.code != exitFailure {
			t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
		wantContains(t, "summary", r.stdout, "pushed 3, failed 1", "line 2 (id s2): request body is larger than max_body_bytes")
	})

	t.Run("an unreachable server fails every line", func(t *testing.T) {
		closed := httptest.NewServer(http.NotFoundHandler())
		closed.Close()
		r := dq(t, closed.URL, "push", "--file", writeLines(t, jobLine("u1", ""), jobLine("u2", "")))
		if r.code != exitFailure {
			t.Fatalf("exit %d", r.code)
		}
		wantContains(t, "summary", r.stdout, "pushed 0, failed 2", "line 1 (id u1):", "connection refused")
	})

	t.Run("only the first errors are listed", func(t *testing.T) {
		url := startServer(t)
		var lines []string
		for range 25 {
			lines = append(lines, "{oops")
		}
		r := dq(t, url, "push", "--file", writeLines(t, lines...))
		wantContains(t, "summary", r.stdout, "pushed 0, failed 25", "line 10: malformed", "... and 15 more failed lines")
		if strings.Contains(r.stdout, "line 11:") {
			t.Errorf("more than %d errors listed:\n%s", maxReportedErrors, r.stdout)
		}
	})

	t.Run("stdin", func(t *testing.T) {
		url := startServer(t)
		reader, writer, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			fmt.Fprintln(writer, jobLine("in1", "a"))
			fmt.Fprintln(writer, jobLine("in2", "b"))
			writer.Close()
		}()
		stdin := os.Stdin
		os.Stdin = reader
		defer func() { os.Stdin = stdin }()
		r := dq(t, url, "push", "--file", "-")
		if r.code != exitOK || !strings.HasPrefix(r.stdout, "pushed 2, failed 0") {
			t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
	})
}

func TestRenderProgress(t *testing.T) {
	tests := []struct {
		done, total int
		elapsed     time.Duration
		want        string
	}{
		{0, 1000, 0, "[------------------------------] 0/1000   0%  0 jobs/s  ETA --"},
		{250, 1000, time.Second, "[#######-----------------------] 250/1000  25%  250 jobs/s  ETA 3s"},
		{500, 1000, 2 * time.Second, "[###############---------------] 500/1000  50%  250 jobs/s  ETA 2s"},
		{1000, 1000, 4 * time.Second, "[##############################] 1000/1000 100%  250 jobs/s  ETA 0s"},
		{0, 0, time.Second, "[##############################] 0/0 100%  0 jobs/s  ETA 0s"},
		{300, -1, 2 * time.Second, "300 jobs  150 jobs/s  2s"},
	}
	for _, tc := range tests {
		if got := renderProgress(tc.done, tc.total, tc.elapsed); got != tc.want {
			t.Errorf("renderProgress(%d, %d, %v)\n got %q\nwant %q", tc.done, tc.total, tc.elapsed, got, tc.want)
		}
	}
}

func TestProgressRedrawsAtMostEveryInterval(t *testing.T) {
	var out bytes.Buffer
	now := time.Unix(1000, 0)
	p := newProgress(&out, 100, func() time.Time { return now })
	p.add(1) // first draw
	for range 10 {
		now = now.Add(10 * time.Millisecond)
		p.add(1) // within 100ms of the last draw: not drawn
	}
	now = now.Add(10 * time.Millisecond)
	p.add(1) // 110ms after the first draw
	p.finish()
	draws := strings.Count(out.String(), "\r")
	if draws != 3 || !strings.HasSuffix(out.String(), "12/100  12%  109 jobs/s  ETA 1s\x1b[K\n") {
		t.Errorf("%d draws, output %q", draws, out.String())
	}
	var nilProgress *progress
	nilProgress.add(1) // no terminal: no progress, no panic
	nilProgress.finish()
	if isTerminal(&out) {
		t.Error("a buffer is not a terminal")
	}
}

// partitionDownServer answers /push as the server does when the partition
// of the ids starting with "x" is unavailable: a batch with such a job is
// stored in part (code 1, every job's status); the others are pushed. It
// returns the server and the number of /push requests it got.
func partitionDownServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		var req wire.PushBatch
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || r.URL.Path != "/push" || len(req.Jobs) == 0 {
			t.Errorf("%s: not a batch push: %v", r.URL.Path, err)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var pushed, outcomes []string // the data of a success, of a batch stored in part
		failed := 0
		for i, job := range req.Jobs {
			pushed = append(pushed, fmt.Sprintf(`{"id":%q,"status":"created"}`, job.ID))
			if strings.HasPrefix(job.ID, "x") {
				failed++
				outcomes = append(outcomes, fmt.Sprintf(`{"index":%d,"id":%q,"status":"failed","message":"redis unavailable, try again"}`, i, job.ID))
			} else {
				outcomes = append(outcomes, fmt.Sprintf(`{"index":%d,"id":%q,"status":"created"}`, i, job.ID))
			}
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if failed == 0 {
			fmt.Fprintf(w, `{"code":0,"message":"pushed %d jobs","data":[%s]}`, len(req.Jobs), strings.Join(pushed, ","))
			return
		}
		fmt.Fprintf(w, `{"code":1,"message":"%d of %d not stored: part of redis is unavailable; pushing the whole batch again is safe","data":[%s]}`,
			failed, len(req.Jobs), strings.Join(outcomes, ","))
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

func TestPushFilePartlyStored(t *testing.T) {
	path := writeLines(t,
		jobLine("a1", ""),
		jobLine("x2", ""), // line 2: its partition is down
		jobLine("a3", ""),
		`{oops`,           // line 4: malformed
		jobLine("x5", ""), // line 5: its partition is down
		jobLine("a6", ""),
		jobLine("a7", ""),
	)
	srv, requests := partitionDownServer(t)
	r := dq(t, srv.URL, "push", "--file", path, "--batch", "3")
	if r.code != exitFailure {
		t.Fatalf("exit %d, want 1 (some jobs not stored)\n%s%s", r.code, r.stdout, r.stderr)
	}
	wantContains(t, "summary", r.stdout,
		"pushed 4, failed 3 (7 lines in",
		"line 2 (id x2): redis unavailable, try again",
		"line 4: malformed JSON",
		"line 5 (id x5): redis unavailable, try again",
		"not stored (or not confirmed by Redis' replicas) because Redis, or part of it, was unavailable, out of memory or short of replicas: 2 lines; pushing the same file again is safe")
	if strings.Contains(r.stdout, "id a1") || strings.Contains(r.stdout, "id a3") {
		t.Errorf("a stored job is reported as failed:\n%s", r.stdout)
	}
	// Batches a1 x2 a3, x5 a6 a7: each sent once, not again job by job.
	if n := requests.Load(); n != 2 {
		t.Errorf("%d requests, want 2 (one per batch, no retry)", n)
	}

	r = dq(t, srv.URL, "push", "--json", "--file", path, "--batch", "3")
	var summary pushSummary
	decodeJSON(t, r.stdout, &summary)
	if r.code != exitFailure || summary.Pushed != 4 || summary.Failed != 3 || summary.NotStored != 2 || len(summary.Errors) != 3 ||
		summary.Errors[0] != (lineError{2, "x2", "redis unavailable, try again"}) {
		t.Errorf("push --file --json: exit %d, %+v", r.code, summary)
	}

	// A batch refused whole for Redis' state fails its lines, once each,
	// not again line by line.
	var refusals atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		refusals.Add(1)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprint(w, `{"code":1,"message":"redis unavailable, try again","data":null}`)
	}))
	t.Cleanup(down.Close)
	r = dq(t, down.URL, "push", "--file", path, "--batch", "3")
	wantContains(t, "summary", r.stdout,
		"pushed 0, failed 7 (7 lines in",
		"line 1 (id a1): redis unavailable, try again",
		"not stored (or not confirmed by Redis' replicas) because Redis, or part of it, was unavailable, out of memory or short of replicas: 6 lines")
	if n := refusals.Load(); n != 2 || r.code != exitFailure {
		t.Errorf("exit %d after %d requests, want 1 after 2 (one per batch)", r.code, n)
	}

	// A file whose lines fail only for being invalid gives no such hint.
	url := startServer(t)
	r = dq(t, url, "push", "--file", writeLines(t, jobLine("ok", ""), `{"topic":"bulk","id":"bad","ttr":0}`))
	if r.code != exitFailure || strings.Contains(r.stdout, "not stored (or not confirmed") {
		t.Errorf("exit %d, summary of invalid lines mentions Redis:\n%s", r.code, r.stdout)
	}
}

// TestPushFileKeepsCallbacks: a line with a callback is stored as a
// webhook job, with every field of its callback and no ttr needed.
func TestPushFileKeepsCallbacks(t *testing.T) {
	url := startServer(t)
	callback := `{"url":"http://127.0.0.1:9/hook","method":"PUT","headers":{"X-A":"1"},"timeout":5,"follow_redirects":true}`
	path := writeLines(t,
		`{"topic":"hooks","id":"h1","delay":3600,"body":"b","callback":`+callback+`}`,
		jobLine("plain", "p"),
	)
	if r := dq(t, url, "push", "--file", path); r.code != exitOK {
		t.Fatalf("push --file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	resp, err := http.Post(url+"/get", "application/json", strings.NewReader(`{"id":"h1"}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var answer struct {
		Code int
		Data struct {
			Callback json.RawMessage
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		t.Fatal(err)
	}
	var got, want any
	if err := json.Unmarshal(answer.Data.Callback, &got); err != nil {
		t.Fatalf("/get h1: code %d, callback %s: %v", answer.Code, answer.Data.Callback, err)
	}
	if err := json.Unmarshal([]byte(callback), &want); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("stored callback %s, want %s", answer.Data.Callback, callback)
	}
}
