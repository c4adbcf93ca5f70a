package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/routers"
)

// The endpoints of the core API: push, pop, finish, delete, get.
func TestCoreEndpoints(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := client.New(url)

		t.Run("push, get, pop, finish", func(t *testing.T) {
			existed, err := c.Push(ctx, client.PushJob{Topic: "core", ID: "c1", TTR: 5 * time.Second, Body: " body kept \n"})
			if err != nil || existed {
				t.Fatalf("Push = %v, %v", existed, err)
			}
			info, err := c.Get(ctx, "c1")
			if err != nil || info == nil {
				t.Fatalf("Get = %+v, %v", info, err)
			}
			if info.Topic != "core" || info.ID != "c1" || info.TTR != 5*time.Second || info.Body != " body kept \n" || info.State != client.StateReady {
				t.Errorf("Get = %+v", info)
			}
			if time.Since(info.Due) > time.Minute || time.Until(info.Due) > time.Second {
				t.Errorf("Due = %v, want about now", info.Due)
			}
			job, err := c.Pop(ctx, []string{"core"}, time.Second)
			if err != nil || job == nil {
				t.Fatalf("Pop = %+v, %v", job, err)
			}
			want := client.Job{ID: "c1", Topic: "core", Body: " body kept \n", TTR: 5 * time.Second, Attempts: 1}
			if *job != want {
				t.Errorf("Pop = %+v, want %+v", *job, want)
			}
			if err := c.Finish(ctx, "c1"); err != nil {
				t.Fatalf("Finish: %v", err)
			}
			if info, err := c.Get(ctx, "c1"); err != nil || info != nil {
				t.Errorf("Get after finish = %+v, %v; want nil, nil", info, err)
			}
		})

		t.Run("unknown ids are not errors", func(t *testing.T) {
			if err := c.Finish(ctx, "nope"); err != nil {
				t.Errorf("Finish: %v", err)
			}
			if err := c.Delete(ctx, "nope"); err != nil {
				t.Errorf("Delete: %v", err)
			}
			if info, err := c.Get(ctx, "nope"); info != nil || err != nil {
				t.Errorf("Get = %+v, %v", info, err)
			}
		})

		t.Run("delete", func(t *testing.T) {
			mustPush(t, c, client.PushJob{Topic: "del", ID: "d1", Delay: time.Hour, TTR: time.Second})
			if err := c.Delete(ctx, "d1"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if info, err := c.Get(ctx, "d1"); info != nil || err != nil {
				t.Errorf("Get after delete = %+v, %v", info, err)
			}
		})

		t.Run("delay in milliseconds", func(t *testing.T) {
			before := time.Now()
			mustPush(t, c, client.PushJob{Topic: "ms", ID: "m1", Delay: 1500 * time.Millisecond, TTR: time.Second})
			after := time.Now()
			info, err := c.Get(ctx, "m1")
			if err != nil || info == nil {
				t.Fatalf("Get = %+v, %v", info, err)
			}
			// Due comes from the server's clock (Redis TIME), in ms.
			low, high := before.Add(1500*time.Millisecond-50*time.Millisecond), after.Add(1500*time.Millisecond+50*time.Millisecond)
			if info.Due.Before(low) || info.Due.After(high) {
				t.Errorf("Due = %v, want within [%v, %v]", info.Due, low, high)
			}
		})

		t.Run("pop over several topics, first listed wins", func(t *testing.T) {
			mustPush(t, c, client.PushJob{Topic: "px", ID: "x1", TTR: time.Second})
			mustPush(t, c, client.PushJob{Topic: "py", ID: "y1", TTR: time.Second})
			for _, want := range []string{"y1", "x1"} {
				job, err := c.Pop(ctx, []string{"py", "px"}, time.Second)
				if err != nil || job == nil || job.ID != want {
					t.Fatalf("Pop = %+v, %v; want %s", job, err, want)
				}
				if err := c.Finish(ctx, job.ID); err != nil {
					t.Fatal(err)
				}
			}
		})

		t.Run("empty pop", func(t *testing.T) {
			started := time.Now()
			job, err := c.Pop(ctx, []string{"empty"}, 0)
			if job != nil || err != nil {
				t.Fatalf("Pop = %+v, %v; want nil, nil", job, err)
			}
			if elapsed := time.Since(started); elapsed > time.Second {
				t.Errorf("a pop with no hold took %v", elapsed)
			}
		})
	})
}

// The lifecycle endpoints: batches, release, touch, stats, topics and the
// dead letters.
func TestLifecycleEndpoints(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		ctx := context.Background()
		c := client.New(url)

		t.Run("if_absent", func(t *testing.T) {
			mustPush(t, c, client.PushJob{Topic: "ia", ID: "ia1", TTR: time.Second, Body: "first"})
			existed, err := c.Push(ctx, client.PushJob{Topic: "ia", ID: "ia1", TTR: time.Second, Body: "second", IfAbsent: true})
			if err != nil || !existed {
				t.Fatalf("Push if absent = %v, %v; want true", existed, err)
			}
			if info, err := c.Get(ctx, "ia1"); err != nil || info == nil || info.Body != "first" {
				t.Errorf("Get = %+v, %v; want the first body", info, err)
			}
			existed, err = c.Push(ctx, client.PushJob{Topic: "ia", ID: "ia2", TTR: time.Second, IfAbsent: true})
			if err != nil || existed {
				t.Errorf("Push of a new id if absent = %v, %v; want false", existed, err)
			}
		})

		t.Run("retry schedule round trip", func(t *testing.T) {
			retry := []time.Duration{2 * time.Minute, 10 * time.Minute}
			mustPush(t, c, client.PushJob{Topic: "rs", ID: "rs1", TTR: time.Second, Retry: retry, MaxAttempts: 5})
			info, err := c.Get(ctx, "rs1")
			if err != nil || info == nil {
				t.Fatalf("Get = %+v, %v", info, err)
			}
			if !slices.Equal(info.Retry, retry) || info.MaxAttempts != 5 || info.AttemptsLimit != 5 || info.CreatedAt.IsZero() {
				t.Errorf("Get = %+v", info)
			}
		})

		t.Run("a schedule without max_attempts limits the attempts", func(t *testing.T) {
			retry := []time.Duration{time.Minute, time.Minute}
			mustPush(t, c, client.PushJob{Topic: "rs", ID: "rs2", TTR: time.Second, Retry: retry})
			info, err := c.Get(ctx, "rs2")
			if err != nil || info == nil {
				t.Fatalf("Get = %+v, %v", info, err)
			}
			if info.MaxAttempts != 0 || info.AttemptsLimit != 3 {
				t.Errorf("Get: max attempts %d, attempts limit %d; want 0 (as pushed) and 3", info.MaxAttempts, info.AttemptsLimit)
			}
		})

		t.Run("push batch", func(t *testing.T) {
			jobs := []client.PushJob{
				{Topic: "batch", ID: "b1", TTR: time.Second},
				{Topic: "batch", ID: "b2", TTR: time.Second},
				{Topic: "batch", ID: "b3", TTR: time.Second},
			}
			results, err := c.PushBatch(ctx, jobs)
			want := []client.PushResult{{ID: "b1", Status: client.PushCreated}, {ID: "b2", Status: client.PushCreated}, {ID: "b3", Status: client.PushCreated}}
			if err != nil || !slices.Equal(results, want) {
				t.Fatalf("PushBatch = %+v, %v; want %+v", results, err, want)
			}
			again := []client.PushJob{{Topic: "batch", ID: "b1", TTR: time.Second}, {Topic: "batch", ID: "b2", TTR: time.Second, IfAbsent: true}}
			results, err = c.PushBatch(ctx, again)
			want = []client.PushResult{{ID: "b1", Status: client.PushReplaced}, {ID: "b2", Status: client.PushExists}}
			if err != nil || !slices.Equal(results, want) {
				t.Fatalf("PushBatch again = %+v, %v; want %+v", results, err, want)
			}
		})

		t.Run("push batch with invalid jobs stores nothing", func(t *testing.T) {
			jobs := []client.PushJob{
				{Topic: "bad", ID: "ok1", TTR: time.Second},
				{Topic: "bad", ID: "bad1"}, // no ttr
				{Topic: "", ID: "bad2", TTR: time.Second},
			}
			_, err := c.PushBatch(ctx, jobs)
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) || apiErr.HTTPStatus != 200 || apiErr.Code != 1 {
				t.Fatalf("PushBatch error = %v, want an APIError", err)
			}
			bad := client.InvalidJobs(err)
			if len(bad) != 2 || bad[0].Index != 1 || bad[0].ID != "bad1" || bad[1].Index != 2 || bad[0].Message == "" {
				t.Errorf("InvalidJobs = %+v", bad)
			}
			if info, err := c.Get(ctx, "ok1"); info != nil || err != nil {
				t.Errorf("a job of a rejected batch was stored: %+v, %v", info, err)
			}
		})

		t.Run("pop count, finish and delete ids", func(t *testing.T) {
			for _, id := range []string{"n1", "n2", "n3"} {
				mustPush(t, c, client.PushJob{Topic: "popn", ID: id, TTR: 5 * time.Second})
			}
			var got []string
			for len(got) < 3 {
				jobs, err := c.PopN(ctx, []string{"popn"}, 10, time.Second)
				if err != nil || len(jobs) == 0 {
					t.Fatalf("PopN = %+v, %v after %v", jobs, err, got)
				}
				for _, job := range jobs {
					got = append(got, job.ID)
				}
			}
			slices.Sort(got)
			if !slices.Equal(got, []string{"n1", "n2", "n3"}) {
				t.Fatalf("PopN gave %v", got)
			}
			jobs, err := c.PopN(ctx, []string{"popn"}, 1, 0)
			if err != nil || jobs == nil || len(jobs) != 0 {
				t.Fatalf("PopN of an empty topic = %#v, %v; want an empty slice", jobs, err)
			}
			result, err := c.FinishIDs(ctx, got)
			if err != nil || result.Finished != 3 || len(result.Dead) != 0 {
				t.Fatalf("FinishIDs = %+v, %v", result, err)
			}

			mustPush(t, c, client.PushJob{Topic: "popn", ID: "del1", Delay: time.Hour, TTR: time.Second})
			mustPush(t, c, client.PushJob{Topic: "popn", ID: "del2", TTR: time.Second})
			deleted, err := c.DeleteIDs(ctx, []string{"del1", "del2", "unknown"})
			if err != nil || deleted != 2 {
				t.Fatalf("DeleteIDs = %d, %v; want 2", deleted, err)
			}
		})

		t.Run("touch and release with receipts", func(t *testing.T) {
			mustPush(t, c, client.PushJob{Topic: "lease", ID: "l1", TTR: 10 * time.Second})
			job, err := c.Pop(ctx, []string{"lease"}, time.Second)
			if err != nil || job == nil {
				t.Fatalf("Pop = %+v, %v", job, err)
			}
			before := time.Now()
			leaseUntil, err := c.Touch(ctx, "l1", job.Attempts)
			if err != nil {
				t.Fatalf("Touch: %v", err)
			}
			if leaseUntil.Before(before.Add(9*time.Second)) || leaseUntil.After(time.Now().Add(11*time.Second)) {
				t.Errorf("lease until %v, want about now + 10s", leaseUntil)
			}
			_, err = c.Touch(ctx, "l1", job.Attempts+1)
			if !client.IsLeaseLost(err) || !strings.HasPrefix(messageOf(err), "stale delivery") {
				t.Errorf("Touch with a wrong receipt = %v, want a stale delivery", err)
			}
			result, err := c.Release(ctx, "l1", client.ReleaseOptions{Attempt: job.Attempts, Delay: new(time.Duration(0))})
			if err != nil || result.State != client.StateReady {
				t.Fatalf("Release = %+v, %v; want ready", result, err)
			}
			_, err = c.Release(ctx, "l1", client.ReleaseOptions{})
			if !client.IsLeaseLost(err) || !strings.HasPrefix(messageOf(err), "job is not reserved") {
				t.Errorf("Release of a ready job = %v", err)
			}
			job, err = c.Pop(ctx, []string{"lease"}, time.Second)
			if err != nil || job == nil || job.Attempts != 2 {
				t.Fatalf("Pop after release = %+v, %v; want attempts 2", job, err)
			}
			before = time.Now()
			result, err = c.Release(ctx, "l1", client.ReleaseOptions{Delay: new(30 * time.Second)})
			if err != nil || result.State != client.StateDelay || result.Due.Before(before.Add(29*time.Second)) {
				t.Fatalf("Release with delay = %+v, %v", result, err)
			}
			if _, err := c.Touch(ctx, "missing", 0); !client.IsLeaseLost(err) {
				t.Errorf("Touch of an unknown job = %v", err)
			}
		})

		t.Run("finish with a receipt", func(t *testing.T) {
			mustPush(t, c, client.PushJob{Topic: "receipt", ID: "r1", TTR: 10 * time.Second})
			job, err := c.Pop(ctx, []string{"receipt"}, time.Second)
			if err != nil || job == nil {
				t.Fatalf("Pop = %+v, %v", job, err)
			}
			err = c.FinishDelivery(ctx, "r1", job.Attempts+1)
			if !client.IsLeaseLost(err) || !strings.HasPrefix(messageOf(err), "stale delivery") {
				t.Errorf("FinishDelivery with a wrong receipt = %v, want a stale delivery", err)
			}
			if info, err := c.Get(ctx, "r1"); err != nil || info == nil || info.State != client.StateReserved {
				t.Fatalf("after a stale finish Get = %+v, %v; want the job still reserved", info, err)
			}
			if err := c.FinishDelivery(ctx, "r1", job.Attempts); err != nil {
				t.Fatalf("FinishDelivery with its receipt: %v", err)
			}
			if info, err := c.Get(ctx, "r1"); err != nil || info != nil {
				t.Fatalf("after the finish Get = %+v, %v; want nil", info, err)
			}
		})

		t.Run("retry schedule decides the release delay", func(t *testing.T) {
			mustPush(t, c, client.PushJob{Topic: "sched", ID: "s1", TTR: 10 * time.Second, Retry: []time.Duration{2 * time.Minute}})
			if _, err := c.Pop(ctx, []string{"sched"}, time.Second); err != nil {
				t.Fatal(err)
			}
			before := time.Now()
			result, err := c.Release(ctx, "s1", client.ReleaseOptions{Attempt: 1})
			if err != nil || result.State != client.StateDelay ||
				result.Due.Before(before.Add(119*time.Second)) || result.Due.After(time.Now().Add(121*time.Second)) {
				t.Fatalf("Release = %+v, %v; want due in 2 minutes", result, err)
			}
		})

		t.Run("stats and topics", func(t *testing.T) {
			mustPush(t, c, client.PushJob{Topic: "st", ID: "st1", Delay: time.Hour, TTR: time.Second})
			mustPush(t, c, client.PushJob{Topic: "st", ID: "st2", TTR: time.Second})
			mustPush(t, c, client.PushJob{Topic: "st", ID: "st3", TTR: 10 * time.Second})
			if _, err := c.Pop(ctx, []string{"st"}, time.Second); err != nil {
				t.Fatal(err)
			}
			stats, err := c.Stats(ctx, "st")
			want := map[string]client.TopicStats{"st": {Delay: 1, Ready: 1, Reserved: 1}}
			if err != nil || len(stats) != 1 || stats["st"] != want["st"] {
				t.Fatalf("Stats(st) = %+v, %v; want %+v", stats, err, want)
			}
			all, err := c.Stats(ctx, "")
			if err != nil || all["st"] != want["st"] {
				t.Fatalf("Stats() = %+v, %v", all, err)
			}
			topics, err := c.Topics(ctx)
			if err != nil || !slices.Contains(topics, "st") || !slices.IsSorted(topics) {
				t.Fatalf("Topics = %v, %v", topics, err)
			}
		})

		t.Run("dead letters", func(t *testing.T) {
			kill := func(id string) {
				t.Helper()
				mustPush(t, c, client.PushJob{Topic: "dead", ID: id, TTR: 10 * time.Second, MaxAttempts: 1})
				job, err := c.Pop(ctx, []string{"dead"}, time.Second)
				if err != nil || job == nil || job.ID != id {
					t.Fatalf("Pop = %+v, %v; want %s", job, err, id)
				}
				result, err := c.Release(ctx, id, client.ReleaseOptions{Attempt: job.Attempts})
				if err != nil || result.State != client.StateDead {
					t.Fatalf("Release of the last attempt = %+v, %v; want dead", result, err)
				}
			}
			kill("dl1")
			if err := c.Finish(ctx, "dl1"); messageOf(err) != "job is dead-lettered" {
				t.Errorf("Finish of a dead job = %v", err)
			}
			mustPush(t, c, client.PushJob{Topic: "dead", ID: "alive", Delay: time.Hour, TTR: time.Second})
			result, err := c.FinishIDs(ctx, []string{"dl1", "alive"})
			var apiErr *client.APIError
			if !errors.As(err, &apiErr) || result.Finished != 1 || !slices.Equal(result.Dead, []string{"dl1"}) {
				t.Errorf("FinishIDs = %+v, %v; want 1 finished, dl1 dead, and an APIError", result, err)
			}
			page, err := c.DeadList(ctx, "dead", 0, 10)
			if err != nil || page.Total != 1 || len(page.Jobs) != 1 {
				t.Fatalf("DeadList = %+v, %v", page, err)
			}
			if dj := page.Jobs[0]; dj.ID != "dl1" || dj.Topic != "dead" || dj.Attempts != 1 || dj.Reason != "released" || dj.DeadAt.IsZero() {
				t.Errorf("dead job = %+v", dj)
			}
			kicked, err := c.DeadKick(ctx, "dead", "dl1")
			if err != nil || !slices.Equal(kicked, []string{"dl1"}) {
				t.Fatalf("DeadKick = %v, %v", kicked, err)
			}
			if info, err := c.Get(ctx, "dl1"); err != nil || info == nil || info.State != client.StateReady || info.Attempts != 0 {
				t.Fatalf("Get after kick = %+v, %v; want ready with attempts reset", info, err)
			}
			if err := c.Delete(ctx, "dl1"); err != nil {
				t.Fatal(err)
			}

			kill("dl2")
			kill("dl3")
			kicked, err = c.DeadKickOldest(ctx, "dead", 1)
			if err != nil || !slices.Equal(kicked, []string{"dl2"}) {
				t.Fatalf("DeadKickOldest = %v, %v; want the oldest, dl2", kicked, err)
			}
			if err := c.Delete(ctx, "dl2"); err != nil {
				t.Fatal(err)
			}
			kill("dl4")
			deleted, err := c.DeadDelete(ctx, "dead", "dl3")
			if err != nil || deleted != 1 {
				t.Fatalf("DeadDelete = %d, %v", deleted, err)
			}
			kill("dl5")
			deleted, err = c.DeadDeleteAll(ctx, "dead")
			if err != nil || deleted != 2 {
				t.Fatalf("DeadDeleteAll = %d, %v; want 2", deleted, err)
			}
			page, err = c.DeadList(ctx, "dead", 0, 0)
			if err != nil || page.Total != 0 || page.Jobs == nil || len(page.Jobs) != 0 {
				t.Fatalf("DeadList after delete all = %#v, %v", page, err)
			}
		})
	})
}

// messageOf returns the server's message of an APIError, or "" otherwise.
func messageOf(err error) string {
	var apiErr *client.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Message
	}
	return ""
}

func TestErrors(t *testing.T) {
	t.Parallel()
	addr := redistest.Mini(t).Addr()
	url := startServerWith(t, addr, routers.Options{BlockTimeout: serverBlockTimeout, MaxBodyBytes: 1024})
	ctx := context.Background()
	c := client.New(url)

	t.Run("code 1 is an APIError", func(t *testing.T) {
		_, err := c.Push(ctx, client.PushJob{Topic: " ", ID: "x", TTR: time.Second})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) {
			t.Fatalf("err = %v (%T), want *APIError", err, err)
		}
		if apiErr.Code != 1 || apiErr.HTTPStatus != 200 || !strings.Contains(apiErr.Message, "topic") || apiErr.Endpoint != "/push" {
			t.Errorf("APIError = %+v", apiErr)
		}
		if client.IsLeaseLost(err) {
			t.Error("a validation error is not a lost lease")
		}
	})
	t.Run("413 is an APIError", func(t *testing.T) {
		_, err := c.Push(ctx, client.PushJob{Topic: "t", ID: "x", TTR: time.Second, Body: strings.Repeat("x", 2000)})
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatus != http.StatusRequestEntityTooLarge || apiErr.Code != 1 {
			t.Fatalf("err = %v, want an APIError with HTTP 413", err)
		}
	})
	t.Run("404 is an APIError", func(t *testing.T) {
		err := c.Call(ctx, "/nope", struct{}{}, nil)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatus != http.StatusNotFound || !strings.Contains(apiErr.Message, "unknown path") {
			t.Fatalf("err = %v, want an APIError with HTTP 404", err)
		}
	})
	t.Run("connection refused is a transport error", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		dead := srv.URL
		srv.Close()
		err := client.New(dead).Finish(ctx, "x")
		var apiErr *client.APIError
		if err == nil || errors.As(err, &apiErr) || errors.Is(err, client.ErrUnexpectedAnswer) {
			t.Fatalf("err = %v (%T), want a transport error", err, err)
		}
	})
	t.Run("an answer that is not an envelope is a transport error", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html>bad gateway</html>")
		}))
		defer srv.Close()
		err := client.New(srv.URL).Finish(ctx, "x")
		var apiErr *client.APIError
		if !errors.Is(err, client.ErrUnexpectedAnswer) || errors.As(err, &apiErr) || !strings.Contains(err.Error(), "502") {
			t.Fatalf("err = %v, want ErrUnexpectedAnswer", err)
		}
	})
	t.Run("a JSON answer without a code is a transport error", func(t *testing.T) {
		// Such as a proxy's own JSON error: read as an envelope, it would
		// be a success with no data.
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, `{"message":"upstream timed out","data":null}`)
		}))
		defer srv.Close()
		err := client.New(srv.URL).Finish(ctx, "x")
		var apiErr *client.APIError
		if !errors.Is(err, client.ErrUnexpectedAnswer) || errors.As(err, &apiErr) {
			t.Fatalf("err = %v, want ErrUnexpectedAnswer", err)
		}
	})
	t.Run("401 envelope is an APIError", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"code":1,"message":"missing or wrong token","data":null}`)
		}))
		defer srv.Close()
		_, err := client.New(srv.URL).Get(ctx, "x")
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatus != 401 || apiErr.Message != "missing or wrong token" || apiErr.Data != nil {
			t.Fatalf("err = %#v, want an APIError with HTTP 401", err)
		}
	})
}

// recordedRequest is what a fake server saw.
type recordedRequest struct {
	path   string
	header http.Header
	body   map[string]any
}

// recordingServer answers every request with answer and records it.
func recordingServer(t *testing.T, answer string) (*httptest.Server, func() []recordedRequest) {
	var mu sync.Mutex
	var seen []recordedRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var body map[string]any
		if err := json.Unmarshal(raw, &body); err != nil {
			t.Errorf("request body %q: %v", raw, err)
		}
		mu.Lock()
		seen = append(seen, recordedRequest{r.URL.Path, r.Header.Clone(), body})
		mu.Unlock()
		io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []recordedRequest {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}

func TestRequestsOnTheWire(t *testing.T) {
	t.Parallel()
	srv, seen := recordingServer(t, `{"code":0,"message":"ok","data":null}`)
	ctx := context.Background()

	t.Run("headers and options", func(t *testing.T) {
		var used int
		hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			used++
			return http.DefaultTransport.RoundTrip(r)
		})}
		c := client.New(srv.URL+"/", client.WithToken("s3cret"), client.WithUserAgent("my-app/1.0"), client.WithHTTPClient(hc))
		if err := c.Finish(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		req := seen()[len(seen())-1]
		if req.path != "/finish" || req.header.Get("Authorization") != "Bearer s3cret" ||
			req.header.Get("User-Agent") != "my-app/1.0" || req.header.Get("Content-Type") != "application/json" {
			t.Errorf("request %s with %v", req.path, req.header)
		}
		if used != 1 {
			t.Errorf("the given http.Client was used %d times, want 1", used)
		}
		if err := client.New(srv.URL).Finish(ctx, "x"); err != nil {
			t.Fatal(err)
		}
		if req := seen()[len(seen())-1]; req.header.Get("Authorization") != "" {
			t.Errorf("no token given, but Authorization %q sent", req.header.Get("Authorization"))
		}
	})

	tests := []struct {
		name string
		call func(c *client.Client) error
		path string
		want string // the request body, as JSON
	}{
		{"push rounds durations up", func(c *client.Client) error {
			_, err := c.Push(ctx, client.PushJob{Topic: "t", ID: "1", Delay: 2 * time.Second, TTR: 1500 * time.Millisecond,
				Retry: []time.Duration{time.Minute, 90*time.Second + 1}})
			return err
		}, "/push", `{"topic":"t","id":"1","delay":2,"ttr":2,"body":"","retry":[60,91]}`},
		{"push with a sub-second delay sends delay_ms", func(c *client.Client) error {
			_, err := c.Push(ctx, client.PushJob{Topic: "t", ID: "1", Delay: 1500 * time.Millisecond, TTR: time.Second, MaxAttempts: 3, IfAbsent: true})
			return err
		}, "/push", `{"topic":"t","id":"1","delay_ms":1500,"ttr":1,"body":"","max_attempts":3,"if_absent":true}`},
		{"pop joins topics and rounds the hold up", func(c *client.Client) error {
			_, err := c.Pop(ctx, []string{"a", "b"}, 1500*time.Millisecond)
			return err
		}, "/pop", `{"topic":"a,b","timeout":2}`},
		{"pop with no hold", func(c *client.Client) error {
			_, err := c.Pop(ctx, []string{"a"}, 0)
			return err
		}, "/pop", `{"topic":"a","timeout":0}`},
		{"release without options", func(c *client.Client) error {
			_, err := c.Release(ctx, "1", client.ReleaseOptions{})
			return err
		}, "/release", `{"id":"1"}`},
		{"release with delay 0 and receipt", func(c *client.Client) error {
			_, err := c.Release(ctx, "1", client.ReleaseOptions{Delay: new(time.Duration(0)), Attempt: 3})
			return err
		}, "/release", `{"id":"1","delay":0,"attempt":3}`},
		{"touch", func(c *client.Client) error {
			_, err := c.Touch(ctx, "1", 2)
			return err
		}, "/touch", `{"id":"1","attempt":2}`},
		{"finish with a receipt", func(c *client.Client) error {
			return c.FinishDelivery(ctx, "1", 2)
		}, "/finish", `{"id":"1","attempt":2}`},
		{"finish with receipt 0 sends none", func(c *client.Client) error {
			return c.FinishDelivery(ctx, "1", 0)
		}, "/finish", `{"id":"1"}`},
		{"stats of all topics", func(c *client.Client) error {
			_, err := c.Stats(ctx, "")
			return err
		}, "/stats", `{}`},
		{"dead kick oldest", func(c *client.Client) error {
			_, err := c.DeadKickOldest(ctx, "t", 5)
			return err
		}, "/dead/kick", `{"topic":"t","count":5}`},
		{"dead delete all", func(c *client.Client) error {
			_, err := c.DeadDeleteAll(ctx, "t")
			return err
		}, "/dead/delete", `{"topic":"t","all":true}`},
		{"finish ids", func(c *client.Client) error {
			_, err := c.FinishIDs(ctx, []string{"a", "b"})
			return err
		}, "/finish", `{"ids":["a","b"]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(client.New(srv.URL)); err != nil {
				t.Fatal(err)
			}
			req := seen()[len(seen())-1]
			var want map[string]any
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			got, _ := json.Marshal(req.body)
			wantJSON, _ := json.Marshal(want)
			if req.path != tc.path || string(got) != string(wantJSON) {
				t.Errorf("sent %s %s\nwant %s %s", req.path, got, tc.path, wantJSON)
			}
		})
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A pop's deadline is its hold plus the request timeout, so the server's
// empty answer arrives before the client gives up; canceling the context
// ends the long poll at once.
func TestPopDeadlines(t *testing.T) {
	t.Parallel()
	url := startServer(t, redistest.Mini(t).Addr())
	ctx := context.Background()

	t.Run("the hold may exceed the request timeout", func(t *testing.T) {
		// The timeout is also the margin the server's answer has after the
		// hold: a second, not less, on a loaded machine.
		c := client.New(url, client.WithRequestTimeout(time.Second))
		started := time.Now()
		job, err := c.Pop(ctx, []string{"idle"}, 2*time.Second)
		if job != nil || err != nil {
			t.Fatalf("Pop = %+v, %v; want nil, nil at the end of the hold", job, err)
		}
		if elapsed := time.Since(started); elapsed < 1900*time.Millisecond {
			t.Errorf("Pop returned after %v, before its hold of 2s ended", elapsed)
		}
		// Other calls keep the short timeout.
		if err := c.Finish(ctx, "x"); err != nil {
			t.Errorf("Finish: %v", err)
		}
	})

	t.Run("an http.Client timeout that would cut the hold is refused", func(t *testing.T) {
		c := client.New(url, client.WithHTTPClient(&http.Client{Timeout: time.Second}))
		if _, err := c.Pop(ctx, []string{"idle"}, 2*time.Second); err == nil || !strings.Contains(err.Error(), "Timeout") {
			t.Fatalf("Pop = %v, want a refusal naming the Timeout", err)
		}
		if _, err := c.Pop(ctx, []string{"idle"}, 0); err != nil {
			t.Fatalf("Pop with no hold: %v", err)
		}
	})

	t.Run("cancel in the middle of a long poll", func(t *testing.T) {
		c := client.New(url)
		sent := make(chan struct{})
		pollCtx, cancel := context.WithCancel(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { close(sent) },
		}))
		defer cancel()
		type popResult struct {
			job *client.Job
			err error
		}
		done := make(chan popResult, 1)
		go func() {
			job, err := c.Pop(pollCtx, []string{"idle"}, serverBlockTimeout)
			done <- popResult{job, err}
		}()
		<-sent
		canceled := time.Now()
		cancel()
		select {
		case got := <-done:
			var apiErr *client.APIError
			if !errors.Is(got.err, context.Canceled) || errors.As(got.err, &apiErr) || got.job != nil {
				t.Fatalf("Pop = %+v, %v; want context.Canceled", got.job, got.err)
			}
			if elapsed := time.Since(canceled); elapsed > 1500*time.Millisecond {
				t.Errorf("Pop returned %v after the cancel", elapsed)
			}
		case <-time.After(3 * time.Second):
			t.Fatal("Pop still holding 3s after its context was canceled")
		}
	})

	t.Run("pop with no topic", func(t *testing.T) {
		if _, err := client.New(url).Pop(ctx, nil, 0); err == nil {
			t.Fatal("Pop with no topic succeeded")
		}
	})
}

// TestPopReadsTheDeliveries holds Pop and PopN to the answers a server may
// give: null (the hold ended) is no job, not an empty one.
func TestPopReadsTheDeliveries(t *testing.T) {
	t.Parallel()
	const delivery = `{"id":"j1","topic":"t","body":"b","ttr":30,"attempts":2}`
	want := client.Job{ID: "j1", Topic: "t", Body: "b", TTR: 30 * time.Second, Attempts: 2}
	ctx := context.Background()

	t.Run("Pop", func(t *testing.T) {
		for _, tc := range []struct {
			data string
			want *client.Job
		}{
			{"null", nil},
			{delivery, &want},
		} {
			srv, _ := recordingServer(t, `{"code":0,"message":"ok","data":`+tc.data+`}`)
			job, err := client.New(srv.URL).Pop(ctx, []string{"t"}, 0)
			if err != nil {
				t.Fatalf("data %s: %v", tc.data, err)
			}
			if (job == nil) != (tc.want == nil) || job != nil && *job != *tc.want {
				t.Errorf("data %s: got %+v, want %+v", tc.data, job, tc.want)
			}
		}
	})
	t.Run("PopN", func(t *testing.T) {
		for _, tc := range []struct {
			data string
			want []client.Job
		}{
			{"null", nil},
			{"[]", []client.Job{}},
			{"[" + delivery + "," + delivery + "]", []client.Job{want, want}},
		} {
			srv, _ := recordingServer(t, `{"code":0,"message":"ok","data":`+tc.data+`}`)
			jobs, err := client.New(srv.URL).PopN(ctx, []string{"t"}, 2, 0)
			if err != nil {
				t.Fatalf("data %s: %v", tc.data, err)
			}
			if (jobs == nil) != (tc.want == nil) || !slices.Equal(jobs, tc.want) {
				t.Errorf("data %s: got %+v (nil %t), want %+v", tc.data, jobs, jobs == nil, tc.want)
			}
		}
	})
}
