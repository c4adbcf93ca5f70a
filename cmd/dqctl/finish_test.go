package main

import (
	"strings"
	"testing"
)

// finish --attempt finishes only the delivery that holds the job.
func TestFinishAttempt(t *testing.T) {
	url := startServer(t)
	mustDQ(t, url, "push", "--topic", "fa", "--id", "f1")
	mustDQ(t, url, "pop", "fa")

	r := dq(t, url, "finish", "--attempt", "2", "f1")
	if r.code != exitFailure || !strings.Contains(r.stderr, "stale delivery") {
		t.Errorf("finish with a stale receipt: %+v", r)
	}
	r = mustDQ(t, url, "get", "f1")
	wantContains(t, "get after a stale finish", r.stdout, "reserved")

	r = mustDQ(t, url, "finish", "--attempt", "1", "f1")
	wantContains(t, "finish", r.stdout, "finished 1")
	if r = dq(t, url, "get", "f1"); r.code != exitFailure || !strings.Contains(r.stderr, "job f1 not found") {
		t.Errorf("get of a finished job: %+v", r)
	}

	for _, args := range [][]string{{"finish", "--attempt", "1", "a", "b"}, {"finish", "--attempt", "0", "a"}} {
		if r := dq(t, url, args...); r.code != exitUsage || !strings.Contains(r.stderr, "--attempt takes one job id") {
			t.Errorf("dqctl %v: %+v", args, r)
		}
	}
}
