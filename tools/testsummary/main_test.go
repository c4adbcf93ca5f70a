package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// events is a go test -json stream: a passing test with a log line, a
// failing one, two skipped (a subtest among them), a test cut short by a
// panic, and a package that did not build.
func events(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	add := func(action, pkg, test, output string) {
		line, err := json.Marshal(map[string]string{"Action": action, "Package": pkg, "Test": test, "Output": output})
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	add("run", "p/a", "TestOK", "")
	add("output", "p/a", "TestOK", "=== RUN   TestOK\n")
	add("output", "p/a", "TestOK", "    a_test.go:10: quiet log of a passing test\n")
	add("output", "p/a", "TestOK", "--- PASS: TestOK (0.00s)\n")
	add("pass", "p/a", "TestOK", "")
	add("output", "p/a", "TestBad", "=== RUN   TestBad\n")
	add("output", "p/a", "TestBad", "    a_test.go:20: the log of a failure\n")
	add("output", "p/a", "TestBad", "--- FAIL: TestBad (0.00s)\n")
	add("fail", "p/a", "TestBad", "")
	add("output", "p/a", "TestRedis/redis", "=== RUN   TestRedis/redis\n")
	add("output", "p/a", "TestRedis/redis", "    backend.go:76: redis-server not found in PATH: skipping\n")
	add("output", "p/a", "TestRedis/redis", "--- SKIP: TestRedis/redis (0.00s)\n")
	add("skip", "p/a", "TestRedis/redis", "")
	add("output", "p/a", "TestBrowser", "=== RUN   TestBrowser\n")
	add("output", "p/a", "TestBrowser", "--- SKIP: TestBrowser (0.00s)\n")
	add("skip", "p/a", "TestBrowser", "")
	add("output", "p/a", "", "FAIL\n")
	add("output", "p/a", "", "FAIL\tp/a\t0.01s\n")
	add("fail", "p/a", "", "")
	add("output", "p/b", "TestHangs", "=== RUN   TestHangs\n")
	add("output", "p/b", "TestHangs", "    b_test.go:5: last words before the panic\n")
	add("output", "p/b", "", "panic: test timed out after 1s\n")
	add("fail", "p/b", "", "")
	add("output", "p/c", "", "PASS\n")
	add("output", "p/c", "", "ok  \tp/c\t0.02s\n")
	add("pass", "p/c", "", "")
	b.WriteString(`{"ImportPath":"p/d","Action":"build-output","Output":"d.go:3:1: syntax error\n"}` + "\n")
	b.WriteString("not an event: go test's own line\n")
	return b.String()
}

func TestReportShowsFailuresAndSummarisesSkips(t *testing.T) {
	var out bytes.Buffer
	r := newReport(&out)
	r.read(strings.NewReader(events(t)))
	r.flush()
	r.summary()
	got := out.String()
	for _, want := range []string{
		"    a_test.go:20: the log of a failure\n--- FAIL: TestBad (0.00s)\n",
		"FAIL\tp/a\t0.01s\n",
		"    b_test.go:5: last words before the panic\n",
		"ok  \tp/c\t0.02s\n",
		"d.go:3:1: syntax error\n",
		"not an event: go test's own line\n",
		"\ntests: 1 passed, 1 failed, 2 skipped\n",
		"Skipped:\n  p/a TestRedis/redis: redis-server not found in PATH: skipping\n  p/a TestBrowser: (no message)\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	for _, unwanted := range []string{"quiet log of a passing test", "PASS\n"} {
		if strings.Contains(got, unwanted) {
			t.Errorf("the report shows %q:\n%s", unwanted, got)
		}
	}
	if !strings.HasSuffix(got, "TestBrowser: (no message)\n") {
		t.Errorf("the report does not end with the summary:\n%s", got)
	}
}

func TestRunExitsWithTheCommandsStatus(t *testing.T) {
	for _, tc := range []struct {
		script string
		want   int
	}{
		{`echo '{"Action":"skip","Package":"p","Test":"TestX"}'`, 0},
		{`echo '{"Action":"fail","Package":"p","Test":"TestX"}'; exit 1`, 1},
		{"exit 3", 3},
	} {
		var out, errOut bytes.Buffer
		if got := run([]string{"sh", "-c", tc.script}, &out, &errOut); got != tc.want {
			t.Errorf("%s: exit status %d, want %d (%s%s)", tc.script, got, tc.want, out.String(), errOut.String())
		}
		if !strings.Contains(out.String(), "tests: ") {
			t.Errorf("%s: no summary: %q", tc.script, out.String())
		}
	}
}
