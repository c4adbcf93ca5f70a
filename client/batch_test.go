package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/routers"
)

// Answers of the server to batches, byte for byte as routers writes them.
const (
	// A push stored in part: every job's status, a message on the failed.
	answerPushPartial = `{"code":1,"message":"2 of 4 not stored: part of redis is unavailable; pushing the whole batch again is safe","data":[` +
		`{"index":0,"id":"a","status":"created"},` +
		`{"index":1,"id":"b","status":"failed","message":"redis unavailable, try again"},` +
		`{"index":2,"id":"c","status":"exists"},` +
		`{"index":3,"id":"d","status":"failed","message":"redis unavailable, try again"}]}`
	// A push rejected by validation: only the bad jobs, no status.
	answerPushInvalid = `{"code":1,"message":"2 of 3 jobs are invalid","data":[` +
		`{"index":1,"id":"b","message":"ttr is required: an integer between 1 and 86400 (seconds)"},` +
		`{"index":2,"id":"","message":"topic is required and must not be blank"}]}`
	answerFinishPartial = `{"code":1,"message":"1 of 4 not finished: part of redis is unavailable; finishing the whole batch again is safe","data":[` +
		`{"index":0,"id":"a","status":"finished"},` +
		`{"index":1,"id":"b","status":"unknown"},` +
		`{"index":2,"id":"c","status":"dead"},` +
		`{"index":3,"id":"d","status":"failed","message":"redis unavailable, try again"}]}`
	answerFinishDead    = `{"code":1,"message":"1 job is dead-lettered","data":{"finished":1,"dead":["c"]}}`
	answerDeletePartial = `{"code":1,"message":"2 of 3 not deleted: part of redis is unavailable; deleting the whole batch again is safe","data":[` +
		`{"index":0,"id":"a","status":"failed","message":"redis unavailable, try again"},` +
		`{"index":1,"id":"b","status":"deleted"},` +
		`{"index":2,"id":"c","status":"failed","message":"redis unavailable, try again"}]}`
)

const msgRedisUnavailable = "redis unavailable, try again"

// partialOf returns err's *PartialBatchError, failing the test when there
// is none or it does not wrap the server's *APIError.
func partialOf(t *testing.T, err error) *client.PartialBatchError {
	t.Helper()
	var partial *client.PartialBatchError
	if !errors.As(err, &partial) {
		t.Fatalf("err = %v (%T), want a *PartialBatchError", err, err)
	}
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != 1 || apiErr.HTTPStatus != 200 || apiErr != partial.APIError {
		t.Errorf("the PartialBatchError does not wrap the server's APIError: %#v", apiErr)
	}
	return partial
}

func TestPartialBatchAnswers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	jobs := func(ids ...string) []client.PushJob {
		var out []client.PushJob
		for _, id := range ids {
			out = append(out, client.PushJob{Topic: "t", ID: id, TTR: time.Second})
		}
		return out
	}

	t.Run("a push stored in part", func(t *testing.T) {
		srv, _ := recordingServer(t, answerPushPartial)
		results, err := client.New(srv.URL).PushBatch(ctx, jobs("a", "b", "c", "d"))
		partial := partialOf(t, err)
		want := []client.BatchResult{
			{Index: 0, ID: "a", Status: client.PushCreated},
			{Index: 1, ID: "b", Status: client.BatchFailed, Message: msgRedisUnavailable},
			{Index: 2, ID: "c", Status: client.PushExists},
			{Index: 3, ID: "d", Status: client.BatchFailed, Message: msgRedisUnavailable},
		}
		if !slices.Equal(partial.Results, want) {
			t.Errorf("Results = %+v\nwant %+v", partial.Results, want)
		}
		if failed := partial.Failed(); !slices.Equal(failed, []client.BatchResult{want[1], want[3]}) {
			t.Errorf("Failed = %+v, want b and d", failed)
		}
		wantResults := []client.PushResult{{ID: "a", Status: client.PushCreated}, {ID: "b", Status: client.BatchFailed}, {ID: "c", Status: client.PushExists}, {ID: "d", Status: client.BatchFailed}}
		if !slices.Equal(results, wantResults) {
			t.Errorf("results = %+v, want %+v", results, wantResults)
		}
		if bad := client.InvalidJobs(err); bad != nil {
			t.Errorf("InvalidJobs of a batch stored in part = %+v, want nil: the jobs are not invalid", bad)
		}
		if got := partial.Message; got != "2 of 4 not stored: part of redis is unavailable; pushing the whole batch again is safe" ||
			err.Error() != "/push: "+got {
			t.Errorf("message %q, error %q", got, err)
		}
	})

	t.Run("a push rejected as invalid is not partial", func(t *testing.T) {
		srv, _ := recordingServer(t, answerPushInvalid)
		results, err := client.New(srv.URL).PushBatch(ctx, jobs("a", "b", ""))
		var partial *client.PartialBatchError
		if errors.As(err, &partial) {
			t.Fatalf("a rejected batch came back as partly stored: %+v", partial.Results)
		}
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || results != nil {
			t.Fatalf("PushBatch = %+v, %v; want no results and an APIError", results, err)
		}
		want := []client.InvalidJob{
			{Index: 1, ID: "b", Message: "ttr is required: an integer between 1 and 86400 (seconds)"},
			{Index: 2, ID: "", Message: "topic is required and must not be blank"},
		}
		if bad := client.InvalidJobs(err); !slices.Equal(bad, want) {
			t.Errorf("InvalidJobs = %+v, want %+v", bad, want)
		}
	})

	t.Run("a finish done in part", func(t *testing.T) {
		srv, _ := recordingServer(t, answerFinishPartial)
		result, err := client.New(srv.URL).FinishIDs(ctx, []string{"a", "b", "c", "d"})
		partial := partialOf(t, err)
		if result.Finished != 1 || !slices.Equal(result.Dead, []string{"c"}) {
			t.Errorf("FinishResult = %+v, want 1 finished and c dead", result)
		}
		want := []client.BatchResult{
			{Index: 0, ID: "a", Status: client.BatchFinished},
			{Index: 1, ID: "b", Status: client.BatchUnknown},
			{Index: 2, ID: "c", Status: client.StateDead},
			{Index: 3, ID: "d", Status: client.BatchFailed, Message: msgRedisUnavailable},
		}
		if !slices.Equal(partial.Results, want) {
			t.Errorf("Results = %+v\nwant %+v", partial.Results, want)
		}
		if failed := partial.Failed(); len(failed) != 1 || failed[0].ID != "d" {
			t.Errorf("Failed = %+v, want d", failed)
		}
	})

	t.Run("a finish refused for dead letters is not partial", func(t *testing.T) {
		srv, _ := recordingServer(t, answerFinishDead)
		result, err := client.New(srv.URL).FinishIDs(ctx, []string{"a", "c"})
		var partial *client.PartialBatchError
		var apiErr *client.APIError
		if errors.As(err, &partial) || !errors.As(err, &apiErr) {
			t.Fatalf("err = %#v, want an APIError only", err)
		}
		if result.Finished != 1 || !slices.Equal(result.Dead, []string{"c"}) {
			t.Errorf("FinishResult = %+v, want 1 finished and c dead", result)
		}
	})

	t.Run("a delete done in part", func(t *testing.T) {
		srv, _ := recordingServer(t, answerDeletePartial)
		deleted, err := client.New(srv.URL).DeleteIDs(ctx, []string{"a", "b", "c"})
		partial := partialOf(t, err)
		if deleted != 1 {
			t.Errorf("deleted = %d, want 1", deleted)
		}
		var failedIDs []string
		for _, r := range partial.Failed() {
			failedIDs = append(failedIDs, r.ID)
		}
		if !slices.Equal(failedIDs, []string{"a", "c"}) {
			t.Errorf("failed ids = %v, want a and c", failedIDs)
		}
	})

	t.Run("the happy path has no error", func(t *testing.T) {
		srv, _ := recordingServer(t, `{"code":0,"message":"pushed 2 jobs","data":[{"id":"a","status":"created"},{"id":"b","status":"replaced"}]}`)
		results, err := client.New(srv.URL).PushBatch(ctx, jobs("a", "b"))
		if err != nil || !slices.Equal(results, []client.PushResult{{ID: "a", Status: client.PushCreated}, {ID: "b", Status: client.PushReplaced}}) {
			t.Errorf("PushBatch = %+v, %v", results, err)
		}
	})
}

// End to end, with the real routers and engine on a Redis Cluster of 3
// primaries, one partition on each: with one primary killed, a batch
// spanning the partitions is done in part, and the client reports every
// job's status; once the node is back, pushing the whole batch again stores
// the rest and only replaces what was stored.
func TestPartialBatchOnACluster(t *testing.T) {
	t.Parallel()
	// Without full coverage the other primaries keep serving their slots
	// while one is down, so exactly one partition fails.
	cluster := redistest.StartCluster(t, 3, 0, "cluster-require-full-coverage no")
	logger := redistest.Logger(t)
	redisOpts := redisconn.Options{ClusterAddrs: cluster.Addrs(), MaxIdle: 4, ConnectTimeout: time.Second,
		ReadTimeout: 2*serverBlockTimeout + 5*time.Second, WriteTimeout: 3 * time.Second}
	q := enginetest.StartWith(t, redisOpts, delayqueue.Options{
		BucketSize: 3, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s", BlockTimeout: serverBlockTimeout,
	}, logger)
	srv := httptest.NewServer(routers.New(q, routers.Options{BlockTimeout: serverBlockTimeout}, logger))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL)
	ctx := context.Background()

	batch := func(prefix string) []client.PushJob {
		jobs := make([]client.PushJob, 12)
		for i := range jobs {
			jobs[i] = client.PushJob{Topic: "partial", ID: fmt.Sprintf("%s%d", prefix, i), Delay: time.Hour, TTR: time.Second}
		}
		return jobs
	}
	old, fresh := batch("old"), batch("new")
	if _, err := c.PushBatch(ctx, old); err != nil {
		t.Fatalf("PushBatch with every node up: %v", err)
	}
	oldIDs := make([]string, len(old))
	for i, job := range old {
		oldIDs[i] = job.ID
	}

	victim := cluster.Node(cluster.Primaries(t)[0])
	victim.Kill()

	results, err := c.PushBatch(ctx, fresh)
	partial := partialOf(t, err)
	if client.InvalidJobs(err) != nil {
		t.Error("InvalidJobs lists jobs of a batch stored in part")
	}
	if len(partial.Results) != len(fresh) || len(results) != len(fresh) {
		t.Fatalf("%d results and %d statuses for %d jobs", len(partial.Results), len(results), len(fresh))
	}
	notStored := map[string]bool{}
	for i, r := range partial.Results {
		switch {
		case r.Index != i || r.ID != fresh[i].ID || results[i] != (client.PushResult{ID: r.ID, Status: r.Status}):
			t.Errorf("result %d = %+v (%+v), want job %s", i, r, results[i], fresh[i].ID)
		case r.Status == client.BatchFailed && r.Message != "":
			notStored[r.ID] = true
		case r.Status != client.PushCreated || r.Message != "":
			t.Errorf("result %d = %+v, want created or failed with a message", i, r)
		}
	}
	if n := len(partial.Failed()); n == 0 || n == len(fresh) || n != len(notStored) {
		t.Fatalf("%d of %d jobs failed (%v), want those of one partition of 3", n, len(fresh), notStored)
	}
	t.Logf("with %s down: %s", victim.Addr, partial.Message)

	deleted, err := c.DeleteIDs(ctx, oldIDs)
	partialDelete := partialOf(t, err)
	if failed := len(partialDelete.Failed()); failed == 0 || deleted+failed != len(oldIDs) {
		t.Errorf("DeleteIDs: %d deleted, %d failed of %d: %+v", deleted, failed, len(oldIDs), partialDelete.Results)
	}

	victim.Restart(t)
	cluster.WaitStateOK(t)
	var again []client.PushResult
	redistest.WaitFor(t, 30*time.Second, "the whole batch to be pushed again", func() bool {
		again, err = c.PushBatch(ctx, fresh)
		return err == nil
	})
	for i, r := range again {
		want := client.PushReplaced
		if notStored[fresh[i].ID] {
			want = client.PushCreated
		}
		if r.ID != fresh[i].ID || r.Status != want {
			t.Errorf("pushed again: job %d = %+v, want %s", i, r, want)
		}
	}
	for _, job := range fresh {
		if info, err := c.Get(ctx, job.ID); err != nil || info == nil || info.State != client.StateDelay {
			t.Errorf("Get %s after pushing again = %+v, %v", job.ID, info, err)
		}
	}
}
