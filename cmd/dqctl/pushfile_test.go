package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
	"github.com/delay-queue/delay-queue/routers"
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
