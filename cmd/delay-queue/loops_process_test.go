package main

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

// procMetric reads one sample of /metrics (-1 when absent).
func procMetric(t *testing.T, s *procServer, sample string) float64 {
	t.Helper()
	status, text := procRequest(t, s, "GET", "/metrics", "", "")
	if status != 200 {
		t.Fatalf("GET /metrics on %s: %d", s.name, status)
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(sample) + ` (\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("/metrics sample %s: %v", sample, err)
	}
	return v
}

// procReadyz is GET /readyz: its status and envelope.
func procReadyz(t *testing.T, s *procServer) (int, procEnvelope) {
	t.Helper()
	status, body := procRequest(t, s, "GET", "/readyz", "", "")
	var env procEnvelope
	if err := json.Unmarshal([]byte(body), &env); err != nil {
		t.Fatalf("GET /readyz on %s: %d %q: %v", s.name, status, body, err)
	}
	return status, env
}

// scannerErrorLines are the server's error-level lines about the scanner's
// script, as a user sees them on stderr at the default log level.
func scannerErrorLines(s *procServer) []string {
	var lines []string
	for _, line := range strings.Split(s.output.String(), "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "loop=scanner") &&
			strings.Contains(line, "script=movedue.lua") {
			lines = append(lines, line)
		}
	}
	return lines
}

// A Redis that refuses a command the scanner's script uses, while pushes
// still work, as an operator sees it: an error in the log at the default
// level naming the loop and the script, the loop's error count in
// /metrics, and, while every round fails, the scanner named stale in the
// /readyz answer, which stays 200; all of it clears when Redis allows the
// command again.
func TestProcessLoopErrorsShowWhenRedisRefusesACommand(t *testing.T) {
	srv := redistest.Start(t)
	admin := procRedisConn(t, srv.Addr, 0)
	setUser := func(rules ...any) {
		t.Helper()
		if _, err := admin.Do("ACL", append([]any{"SETUSER", "dq"}, rules...)...); err != nil {
			t.Fatalf("ACL SETUSER dq %v: %v", rules, err)
		}
	}
	setUser("on", ">dq-secret", "~*", "&*", "+@all")
	s := startProcServer(t, "loops", srv.Addr, "redis.username = dq", "redis.password = dq-secret")
	c := newProcClient()
	defer c.close()

	const errorsSample = `delayqueue_loop_errors_total{loop="scanner"}`
	const staleSample = `delayqueue_loop_stale{loop="scanner"}`
	if n := procMetric(t, s, errorsSample); n != 0 {
		t.Fatalf("%s = %v before any error, want 0", errorsSample, n)
	}
	// movedue.lua finds the partition's due topics with ZRANGEBYSCORE, its
	// first command; a push uses none.
	setUser("-zrangebyscore")
	delayMS := int64(200)
	c.mustPush(t, s, procPush{Topic: "acl", ID: "refused-read", DelayMS: &delayMS, TTR: 30})
	redistest.WaitFor(t, 5*time.Second, "the scanner's error logged at error level and counted", func() bool {
		return len(scannerErrorLines(s)) == 1 && procMetric(t, s, errorsSample) >= 1
	})
	if status, env := procReadyz(t, s); status != 200 || env.Code != 0 || env.Message != "ready" || !env.dataIsNull() {
		t.Fatalf("/readyz after one failed round: %d %+v, want 200 ready", status, env)
	}

	// The read allowed again, and ZREM, with which the script drops a due
	// job's old entry after writing its new one, refused: every round
	// fails while the jobs are due, losing none of them. Each error is
	// logged once however often it happens.
	setUser("+zrangebyscore", "-zrem")
	c.mustPush(t, s, procPush{Topic: "acl", ID: "refused-zrem", DelayMS: &delayMS, TTR: 30})
	before := procMetric(t, s, errorsSample)
	var env procEnvelope
	redistest.WaitFor(t, 15*time.Second, "/readyz naming the stale scanner", func() bool {
		var status int
		status, env = procReadyz(t, s)
		if status != 200 || env.Code != 0 {
			t.Fatalf("/readyz with failing scanner rounds: %d %+v, want 200 code 0", status, env)
		}
		return env.Message != "ready"
	})
	var data wire.Readiness
	if err := json.Unmarshal(env.Data, &data); err != nil {
		t.Fatalf("/readyz data %s: %v", env.Data, err)
	}
	if env.Message != "ready, but background loops are behind: scanner" || len(data.StaleLoops) != 1 ||
		data.StaleLoops[0].Loop != "scanner" || data.StaleLoops[0].SecondsBehind <= data.StaleLoops[0].StaleAfterSeconds {
		t.Fatalf("/readyz = %q %s, want the scanner named stale", env.Message, env.Data)
	}
	if v := procMetric(t, s, staleSample); v != 1 {
		t.Errorf("%s = %v with the scanner stale, want 1", staleSample, v)
	}
	if after := procMetric(t, s, errorsSample); after < before+2 {
		t.Errorf("%s went from %v to %v while the scanner kept failing, want every failure counted", errorsSample, before, after)
	}
	// Each distinct error once: the refused commands sit at several
	// places of the script, each its own error.
	lines := scannerErrorLines(s)
	seen := map[string]bool{}
	for _, line := range lines {
		err := line[strings.Index(line, "err="):]
		if seen[err] {
			t.Errorf("scanner error logged twice while it kept happening:\n%s", strings.Join(lines, "\n"))
		}
		seen[err] = true
	}
	if len(lines) < 2 {
		t.Errorf("scanner errors logged %d times, want each distinct error once (at least 2):\n%s", len(lines), strings.Join(lines, "\n"))
	}

	// Allowed again: both jobs are delivered and the scanner is fresh.
	setUser("+@all")
	popped := map[string]bool{}
	for range 2 {
		if job := c.mustPop(t, s, "acl", 10); job != nil {
			popped[job.ID] = true
		}
	}
	if !popped["refused-read"] || !popped["refused-zrem"] {
		t.Fatalf("popped %v after the ACL was fixed, want refused-read and refused-zrem", popped)
	}
	redistest.WaitFor(t, 5*time.Second, "/readyz plain ready again", func() bool {
		status, env := procReadyz(t, s)
		return status == 200 && env.Message == "ready" && env.dataIsNull() && procMetric(t, s, staleSample) == 0
	})
	s.Stop(30 * time.Second)
}
