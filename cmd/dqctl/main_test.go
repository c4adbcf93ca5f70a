package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/routers"
)

// startServer runs the real engine on miniredis behind an httptest server.
func startServer(t *testing.T) string {
	t.Helper()
	return startServerWith(t, routers.Options{BlockTimeout: 5 * time.Second})
}

// startServerWith is startServer with the HTTP layer's options.
func startServerWith(t *testing.T, opts routers.Options) string {
	t.Helper()
	logger := slog.New(redistest.LogHandler(t, slog.LevelInfo))
	q := enginetest.Start(t, redistest.Mini(t).Addr(), 5*time.Second, logger)
	srv := httptest.NewServer(routers.New(q, opts, logger))
	t.Cleanup(srv.Close)
	return srv.URL
}

// result is one dqctl run.
type result struct {
	stdout, stderr string
	code           int
}

// dq runs dqctl against url with args.
func dq(t *testing.T, url string, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(append([]string{"--url", url}, args...), &stdout, &stderr)
	return result{stdout.String(), stderr.String(), code}
}

// mustDQ runs dqctl and fails the test unless it exits 0.
func mustDQ(t *testing.T, url string, args ...string) result {
	t.Helper()
	r := dq(t, url, args...)
	if r.code != exitOK {
		t.Fatalf("dqctl %v: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
	}
	return r
}

// decodeJSON decodes a --json output into v.
func decodeJSON(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("--json output %q: %v", out, err)
	}
}

// wantLines checks that out holds each of the substrings.
func wantContains(t *testing.T, what, out string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(out, s) {
			t.Errorf("%s %q does not contain %q", what, out, s)
		}
	}
}

func TestJobCommands(t *testing.T) {
	url := startServer(t)

	r := mustDQ(t, url, "push", "--topic", "orders", "--id", "o1", "--delay", "1h", "--ttr", "30", "--body", "close order 1")
	wantContains(t, "push", r.stdout, "pushed o1 to orders, ready in 1h0m0s")

	r = mustDQ(t, url, "push", "--topic", "orders", "--id", "o1", "--ttr", "30", "--if-absent", "--json")
	var pushed struct {
		ID     string `json:"id"`
		Exists bool   `json:"exists"`
	}
	decodeJSON(t, r.stdout, &pushed)
	if pushed.ID != "o1" || !pushed.Exists {
		t.Errorf("push --if-absent --json = %s", r.stdout)
	}

	r = mustDQ(t, url, "get", "o1")
	wantContains(t, "get", r.stdout, "ID", "o1", "STATE", "delay", "TTR", "30s", "BODY", "close order 1", "(in ")
	r = mustDQ(t, url, "get", "o1", "--json") // a global flag after the arguments
	var info client.JobInfo
	decodeJSON(t, r.stdout, &info)
	if info.ID != "o1" || info.Topic != "orders" || info.TTR != 30*time.Second || info.State != "delay" || info.Body != "close order 1" {
		t.Errorf("get --json = %s", r.stdout)
	}
	var raw map[string]any
	decodeJSON(t, r.stdout, &raw)
	if _, ok := raw["delay_ms"]; !ok || raw["ttr"] != float64(30) {
		t.Errorf("get --json is not the API's /get shape: %s", r.stdout)
	}

	// Pop: table, JSON, several topics, count.
	mustDQ(t, url, "push", "--topic", "mail", "--id", "m1", "--body", "line one\nline two")
	r = mustDQ(t, url, "pop", "orders,mail")
	wantContains(t, "pop", r.stdout, "ID", "TOPIC", "ATTEMPTS", "m1", "mail", `"line one\nline two"`)
	r = mustDQ(t, url, "pop", "mail")
	if r.stdout != "" || !strings.Contains(r.stderr, "no job ready") {
		t.Errorf("empty pop: stdout %q stderr %q", r.stdout, r.stderr)
	}
	r = mustDQ(t, url, "--json", "pop", "mail")
	if strings.TrimSpace(r.stdout) != "null" {
		t.Errorf("empty pop --json = %q, want null", r.stdout)
	}
	r = mustDQ(t, url, "pop", "--json", "--count", "5", "mail")
	if strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("empty pop --count --json = %q, want []", r.stdout)
	}
	for _, id := range []string{"p1", "p2"} {
		mustDQ(t, url, "push", "--topic", "pairs", "--id", id, "--ttr", "60")
	}
	r = mustDQ(t, url, "pop", "--count", "5", "--timeout", "1s", "--json", "pairs")
	var jobs []client.Job
	decodeJSON(t, r.stdout, &jobs)
	if len(jobs) == 0 || jobs[0].Topic != "pairs" || jobs[0].Attempts != 1 {
		t.Fatalf("pop --count --json = %s", r.stdout)
	}

	// Touch, release, finish, delete.
	r = mustDQ(t, url, "touch", "--attempt", "1", "m1")
	wantContains(t, "touch", r.stdout, "lease of m1 extended until")
	r = dq(t, url, "touch", "--attempt", "2", "m1")
	if r.code != exitFailure || !strings.Contains(r.stderr, "stale delivery") {
		t.Errorf("touch with a stale receipt: %+v", r)
	}
	r = mustDQ(t, url, "release", "--delay", "0", "--attempt", "1", "m1", "--json")
	var released client.ReleaseResult
	decodeJSON(t, r.stdout, &released)
	if released.State != "ready" || released.Due.IsZero() {
		t.Errorf("release --json = %s", r.stdout)
	}
	mustDQ(t, url, "pop", "mail")
	r = mustDQ(t, url, "release", "--delay", "90s", "m1")
	wantContains(t, "release", r.stdout, "released m1: delay, due", "(in 1m30s)")

	r = mustDQ(t, url, "finish", "m1", "o1")
	wantContains(t, "finish", r.stdout, "finished 2")
	for _, args := range [][]string{{"get", "m1"}, {"get", "--json", "m1"}} {
		r = dq(t, url, args...)
		if r.code != exitFailure || !strings.Contains(r.stderr, "job m1 not found") {
			t.Errorf("dqctl %v of a finished job: %+v", args, r)
		}
	}
	if r.stdout != "null\n" {
		t.Errorf("get --json of a finished job printed %q, want null", r.stdout)
	}

	mustDQ(t, url, "push", "--topic", "del", "--id", "d1", "--delay", "60")
	mustDQ(t, url, "push", "--topic", "del", "--id", "d2")
	r = mustDQ(t, url, "delete", "d1", "d2", "unknown")
	wantContains(t, "delete", r.stdout, "deleted 2 of 3")
	r = mustDQ(t, url, "delete", "--json", "d1")
	if strings.TrimSpace(r.stdout) != `{
  "deleted": 0
}` {
		t.Errorf("delete --json = %q", r.stdout)
	}
}

func TestPushFlags(t *testing.T) {
	url := startServer(t)
	bodyFile := filepath.Join(t.TempDir(), "body")
	if err := os.WriteFile(bodyFile, []byte("  from a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	mustDQ(t, url, "push", "--topic", "n", "--id", "n1", "--body-file", bodyFile,
		"--retry", "120,10m,1h", "--max-attempts", "3", "--delay", "1500ms")
	r := mustDQ(t, url, "get", "--json", "n1")
	var info client.JobInfo
	decodeJSON(t, r.stdout, &info)
	wantRetry := []time.Duration{2 * time.Minute, 10 * time.Minute, time.Hour}
	if info.Body != "  from a file\n" || info.MaxAttempts != 3 || fmt.Sprint(info.Retry) != fmt.Sprint(wantRetry) || info.TTR != time.Minute {
		t.Errorf("pushed job = %+v", info)
	}
	// Both times come from the server's clock.
	if delay := info.Due.Sub(info.CreatedAt); delay < 1490*time.Millisecond || delay > 1510*time.Millisecond {
		t.Errorf("due %v after its creation, want 1.5s", delay)
	}
	r = mustDQ(t, url, "get", "n1")
	wantContains(t, "get", r.stdout, "ATTEMPTS  0 of 3", "RETRY", "2m0s,10m0s,1h0m0s")

	// A schedule without --max-attempts limits the job to len(retry)+1.
	mustDQ(t, url, "push", "--topic", "n", "--id", "n2", "--retry", "1m,1m")
	r = mustDQ(t, url, "get", "n2")
	wantContains(t, "get", r.stdout, "ATTEMPTS  0 of 3")
}

func TestStatsTopicsAndDeadLetters(t *testing.T) {
	url := startServer(t)
	mustDQ(t, url, "push", "--topic", "alpha", "--id", "a1", "--delay", "1h")
	mustDQ(t, url, "push", "--topic", "alpha", "--id", "a2")
	for _, id := range []string{"z1", "z2", "z3"} {
		mustDQ(t, url, "push", "--topic", "zeta", "--id", id, "--max-attempts", "1", "--body", "body of "+id)
		mustDQ(t, url, "pop", "zeta")
		r := mustDQ(t, url, "release", id)
		wantContains(t, "release of the last attempt", r.stdout, "dead-lettered")
	}

	r := mustDQ(t, url, "stats")
	wantContains(t, "stats", r.stdout, "TOPIC  DELAY  READY  RESERVED  DEAD", "alpha  1      1      0         0", "zeta   0      0      0         3")
	r = mustDQ(t, url, "stats", "--json", "alpha")
	var stats map[string]client.TopicStats
	decodeJSON(t, r.stdout, &stats)
	if len(stats) != 1 || stats["alpha"] != (client.TopicStats{Delay: 1, Ready: 1}) {
		t.Errorf("stats --json alpha = %s", r.stdout)
	}
	r = mustDQ(t, url, "topics")
	if r.stdout != "alpha\nzeta\n" {
		t.Errorf("topics = %q", r.stdout)
	}
	r = mustDQ(t, url, "topics", "--json")
	var topics []string
	decodeJSON(t, r.stdout, &topics)
	if fmt.Sprint(topics) != "[alpha zeta]" {
		t.Errorf("topics --json = %s", r.stdout)
	}

	r = mustDQ(t, url, "dead", "list", "zeta", "--limit", "2")
	wantContains(t, "dead list", r.stdout, "ID", "REASON", "z3", "z2", "released", "body of z3")
	if strings.Contains(r.stdout, "z1") {
		t.Errorf("dead list --limit 2 shows the oldest: %s", r.stdout)
	}
	wantContains(t, "dead list", r.stderr, "1 to 2 of 3 dead letters in zeta")
	r = mustDQ(t, url, "dead", "list", "--json", "--offset", "2", "zeta")
	var page client.DeadPage
	decodeJSON(t, r.stdout, &page)
	if page.Total != 3 || len(page.Jobs) != 1 || page.Jobs[0].ID != "z1" || page.Jobs[0].Reason != "released" {
		t.Errorf("dead list --json --offset 2 = %s", r.stdout)
	}

	r = mustDQ(t, url, "dead", "kick", "zeta", "z2")
	wantContains(t, "dead kick", r.stdout, "kicked 1 back to ready", "z2")
	r = dq(t, url, "dead", "kick", "zeta", "z2")
	if r.code != exitFailure || !strings.Contains(r.stderr, "not in the dead letters") {
		t.Errorf("second kick of z2: %+v", r)
	}
	r = mustDQ(t, url, "dead", "kick", "--count", "5", "--json", "zeta")
	var kicked map[string][]string
	decodeJSON(t, r.stdout, &kicked)
	if fmt.Sprint(kicked["kicked"]) != "[z1 z3]" {
		t.Errorf("dead kick --count --json = %s", r.stdout)
	}
	for range 3 {
		var job client.Job
		decodeJSON(t, mustDQ(t, url, "pop", "--json", "zeta").stdout, &job)
		mustDQ(t, url, "release", job.ID)
	}
	r = mustDQ(t, url, "dead", "delete", "zeta", "z1")
	wantContains(t, "dead delete", r.stdout, "deleted 1")
	r = dq(t, url, "dead", "delete", "zeta", "z1")
	if r.code != exitFailure {
		t.Errorf("second dead delete of z1: %+v", r)
	}
	r = mustDQ(t, url, "dead", "delete", "--all", "--json", "zeta")
	var deleted map[string]int
	decodeJSON(t, r.stdout, &deleted)
	if deleted["deleted"] != 2 {
		t.Errorf("dead delete --all --json = %s", r.stdout)
	}
	r = mustDQ(t, url, "finish", "--json", "a2")
	var finished client.FinishResult
	decodeJSON(t, r.stdout, &finished)
	if finished.Finished != 1 || finished.Dead == nil {
		t.Errorf("finish --json = %s", r.stdout)
	}
}

func TestExitCodes(t *testing.T) {
	url := startServer(t)
	closed := httptest.NewServer(http.NotFoundHandler())
	unreachable := closed.URL
	closed.Close()

	tests := []struct {
		name       string
		url        string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"no command", url, nil, exitUsage, "usage: dqctl"},
		{"help", url, []string{"help"}, exitOK, ""},
		{"unknown command", url, []string{"frobnicate"}, exitUsage, `unknown command "frobnicate"`},
		{"unknown flag", url, []string{"get", "--nope", "x"}, exitUsage, "flag provided but not defined: -nope"},
		{"missing argument", url, []string{"get"}, exitUsage, "give one job id"},
		{"push without topic", url, []string{"push", "--id", "x"}, exitUsage, "--topic and --id are required"},
		{"bad duration", url, []string{"push", "--topic", "t", "--id", "x", "--delay", "soon"}, exitUsage, `"soon" is neither whole seconds nor a duration`},
		{"negative duration", url, []string{"pop", "--timeout", "-5", "t"}, exitUsage, "negative"},
		{"file with job flags", url, []string{"push", "--file", "x.jsonl", "--topic", "t"}, exitUsage, "drop the job flags"},
		{"batch too large", url, []string{"push", "--file", "x.jsonl", "--batch", "1001"}, exitUsage, "--batch must be between 1 and 1000"},
		{"dead without subcommand", url, []string{"dead"}, exitUsage, "list, kick or delete"},
		{"bad flag value", url, []string{"dead", "list", "--limit", "x", "t"}, exitUsage, `invalid value "x" for flag -limit`},
		{"dead list limit 0", url, []string{"dead", "list", "--limit", "0", "t"}, exitUsage, "--limit must be between 1 and 1000"},
		{"dead list negative offset", url, []string{"dead", "list", "--offset", "-1", "t"}, exitUsage, "--offset must not be negative"},
		{"dead kick with id and count", url, []string{"dead", "kick", "t", "x", "--count", "2"}, exitUsage, "either a job id or --count"},
		{"API error", url, []string{"push", "--topic", "a,b", "--id", "x"}, exitFailure, "/push: topic must not contain a comma"},
		{"API error on pop", url, []string{"pop", "--timeout", "1h", "t"}, exitFailure, "timeout must be"},
		{"not found", url, []string{"get", "ghost"}, exitFailure, "job ghost not found"},
		{"unreachable server", unreachable, []string{"stats"}, exitFailure, "connection refused"},
		{"missing file", url, []string{"push", "--file", filepath.Join(t.TempDir(), "none.jsonl")}, exitFailure, "no such file"},
		{"command help", url, []string{"stats", "-h"}, exitOK, "usage: dqctl stats"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := dq(t, tc.url, tc.args...)
			if r.code != tc.wantCode || !strings.Contains(r.stderr, tc.wantStderr) {
				t.Errorf("exit %d, stderr %q\nwant exit %d, stderr containing %q", r.code, r.stderr, tc.wantCode, tc.wantStderr)
			}
			if tc.wantStderr != "" && strings.Count(r.stderr, tc.wantStderr) > 1 {
				t.Errorf("stderr %q says %q more than once", r.stderr, tc.wantStderr)
			}
		})
	}
}

// The global flags default to the environment.
func TestEnvironment(t *testing.T) {
	var seenAuth []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seenAuth = append(seenAuth, r.Header.Get("Authorization"))
		io.WriteString(w, `{"code":0,"message":"ok","data":["t1"]}`)
	}))
	defer srv.Close()
	t.Setenv(envURL, srv.URL)
	t.Setenv(envToken, "from-env")

	var stdout, stderr bytes.Buffer
	if code := run([]string{"topics"}, &stdout, &stderr); code != exitOK || stdout.String() != "t1\n" {
		t.Fatalf("topics with $DQ_URL: exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	if code := run([]string{"topics", "--token", "from-flag"}, &stdout, &stderr); code != exitOK {
		t.Fatalf("topics --token: exit %d, %q", code, stderr.String())
	}
	if fmt.Sprint(seenAuth) != "[Bearer from-env Bearer from-flag]" {
		t.Errorf("Authorization headers sent: %q", seenAuth)
	}
}
