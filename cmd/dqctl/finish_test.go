package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
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

// finish and delete of several ids that the server handled in part print
// what was done and each id not handled with the server's reason, and
// exit 1; with --json, the same as one object.
func TestFinishAndDeletePartlyDone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := "finished"
		if r.URL.Path == "/delete" {
			done = "deleted"
		}
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		fmt.Fprintf(w, `{"code":1,"message":"1 of 3 not %s: part of redis is unavailable; sending the whole batch again is safe",`+
			`"data":[{"index":0,"id":"a","status":%q},{"index":1,"id":"b","status":"failed","message":"redis unavailable, try again"},`+
			`{"index":2,"id":"c","status":"unknown"}]}`, done, done)
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		command, wantOut string
	}{
		{"finish", "finished 1\nnot finished (redis unavailable, try again): b\n"},
		{"delete", "deleted 1 of 3\nnot deleted (redis unavailable, try again): b\n"},
	} {
		r := dq(t, srv.URL, tc.command, "a", "b", "c")
		if r.code != exitFailure || r.stdout != tc.wantOut || !strings.Contains(r.stderr, "1 of 3 not") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want 1, %q and the server's message", tc.command, r.code, r.stdout, r.stderr, tc.wantOut)
		}
		r = dq(t, srv.URL, "--json", tc.command, "a", "b", "c")
		var out struct {
			Finished, Deleted int
			Failed            []struct{ ID, Message string }
		}
		decodeJSON(t, r.stdout, &out)
		if r.code != exitFailure || out.Finished+out.Deleted != 1 || len(out.Failed) != 1 || out.Failed[0].ID != "b" {
			t.Errorf("%s --json: exit %d, %s", tc.command, r.code, r.stdout)
		}
	}
}
