package client_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/client"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// deliveryLog records what a handler saw.
type deliveryLog struct {
	mu    sync.Mutex
	seen  []client.Job
	times []time.Time
}

func (l *deliveryLog) add(job client.Job) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, job)
	l.times = append(l.times, time.Now())
}

func (l *deliveryLog) jobs() []client.Job {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.seen)
}

func (l *deliveryLog) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *deliveryLog) at(i int) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.times[i]
}

// runWorker starts w.Run and returns a function that cancels it and
// returns Run's error; it fails the test if Run takes over 5 s to return.
func runWorker(t *testing.T, w *client.Worker) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(5 * time.Second):
				t.Errorf("Worker.Run did not return 5s after its context was canceled")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// waitFinished waits until none of ids is left on the server.
func waitFinished(t *testing.T, c *client.Client, timeout time.Duration, ids ...string) {
	t.Helper()
	redistest.WaitFor(t, timeout, fmt.Sprintf("jobs %v finished", ids), func() bool {
		for _, id := range ids {
			if info, err := c.Get(context.Background(), id); err != nil || info != nil {
				return false
			}
		}
		return true
	})
}

func TestWorker(t *testing.T) {
	t.Parallel()
	forEachServer(t, func(t *testing.T, url string) {
		c := client.New(url)
		noBackoff := func(int) time.Duration { return 0 }

		t.Run("finishes on success", func(t *testing.T) {
			t.Parallel()
			var log deliveryLog
			w := &client.Worker{Client: c, PollTimeout: serverBlockTimeout, Topics: []string{"w-ok"}, Concurrency: 3, Logger: redistest.Logger(t),
				Handler: func(ctx context.Context, job client.Job) error { log.add(job); return nil }}
			stop := runWorker(t, w)
			ids := []string{"ok1", "ok2", "ok3", "ok4", "ok5"}
			for _, id := range ids {
				mustPush(t, c, client.PushJob{Topic: "w-ok", ID: id, TTR: 5 * time.Second, Body: "body of " + id})
			}
			waitFinished(t, c, 5*time.Second, ids...)
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			var got []string
			for _, job := range log.jobs() {
				if job.Body != "body of "+job.ID || job.Attempts != 1 || job.TTR != 5*time.Second {
					t.Errorf("handler got %+v", job)
				}
				got = append(got, job.ID)
			}
			slices.Sort(got)
			if !slices.Equal(got, ids) {
				t.Errorf("handled %v, want each of %v once", got, ids)
			}
		})

		t.Run("releases on error, redelivered with attempts 2", func(t *testing.T) {
			t.Parallel()
			var log deliveryLog
			w := &client.Worker{Client: c, PollTimeout: serverBlockTimeout, Topics: []string{"w-err"}, Logger: redistest.Logger(t), Backoff: noBackoff,
				Handler: func(ctx context.Context, job client.Job) error {
					log.add(job)
					if job.Attempts == 1 {
						return errors.New("temporary failure")
					}
					return nil
				}}
			runWorker(t, w)
			mustPush(t, c, client.PushJob{Topic: "w-err", ID: "e1", TTR: 30 * time.Second})
			waitFinished(t, c, 5*time.Second, "e1")
			if got := log.jobs(); len(got) != 2 || got[0].Attempts != 1 || got[1].Attempts != 2 {
				t.Errorf("deliveries %+v, want attempts 1 then 2", got)
			}
		})

		t.Run("panic becomes a release", func(t *testing.T) {
			t.Parallel()
			var log deliveryLog
			w := &client.Worker{Client: c, PollTimeout: serverBlockTimeout, Topics: []string{"w-panic"}, Logger: redistest.Logger(t), Backoff: noBackoff,
				Handler: func(ctx context.Context, job client.Job) error {
					log.add(job)
					if job.Attempts == 1 {
						panic("handler bug")
					}
					return nil
				}}
			stop := runWorker(t, w)
			mustPush(t, c, client.PushJob{Topic: "w-panic", ID: "p1", TTR: 30 * time.Second})
			waitFinished(t, c, 5*time.Second, "p1")
			if err := stop(); err != nil {
				t.Fatalf("Run after a panic: %v", err)
			}
			if got := log.jobs(); len(got) != 2 || got[1].Attempts != 2 {
				t.Errorf("deliveries %+v, want a redelivery after the panic", got)
			}
		})

		t.Run("backoff without a schedule, schedule with one, RetryAfter over both", func(t *testing.T) {
			t.Parallel()
			const retryAfterID = "ra"
			var log deliveryLog
			w := &client.Worker{Client: c, PollTimeout: serverBlockTimeout, Topics: []string{"w-backoff"}, Concurrency: 3, Logger: redistest.Logger(t),
				Backoff: func(attempts int) time.Duration { return time.Duration(attempts) * time.Second },
				Handler: func(ctx context.Context, job client.Job) error {
					log.add(job)
					switch {
					case job.Attempts > 1:
						return nil
					case job.ID == retryAfterID:
						return client.RetryAfter(0, errors.New("try again now"))
					}
					return errors.New("first delivery fails")
				}}
			runWorker(t, w)
			mustPush(t, c, client.PushJob{Topic: "w-backoff", ID: "plain", TTR: 30 * time.Second})
			mustPush(t, c, client.PushJob{Topic: "w-backoff", ID: "sched", TTR: 30 * time.Second, Retry: []time.Duration{2 * time.Second}})
			mustPush(t, c, client.PushJob{Topic: "w-backoff", ID: retryAfterID, TTR: 30 * time.Second, Retry: []time.Duration{time.Hour}})
			waitFinished(t, c, 10*time.Second, "plain", "sched", retryAfterID)

			gaps := map[string]time.Duration{}
			first := map[string]time.Time{}
			for i, job := range log.jobs() {
				switch job.Attempts {
				case 1:
					first[job.ID] = log.at(i)
				case 2:
					gaps[job.ID] = log.at(i).Sub(first[job.ID])
				}
			}
			// Backoff(1) = 1s for the plain job; the schedule's 2s, not the
			// backoff, for the scheduled one; RetryAfter(0) beats an hour.
			if gap := gaps["plain"]; gap < 900*time.Millisecond || gap > 5*time.Second {
				t.Errorf("plain job redelivered after %v, want the backoff of 1s", gap)
			}
			if gap := gaps["sched"]; gap < 1900*time.Millisecond || gap > 6*time.Second {
				t.Errorf("scheduled job redelivered after %v, want its schedule's 2s", gap)
			}
			if gap, ok := gaps[retryAfterID]; !ok || gap > 5*time.Second {
				t.Errorf("RetryAfter(0) job redelivered after %v (seen: %v), want at once", gap, ok)
			}
		})

		t.Run("touches a handler running past its ttr", func(t *testing.T) {
			t.Parallel()
			var log deliveryLog
			w := &client.Worker{Client: c, PollTimeout: serverBlockTimeout, Topics: []string{"w-long"}, Concurrency: 2, Logger: redistest.Logger(t),
				Handler: func(ctx context.Context, job client.Job) error {
					log.add(job)
					select { // the work itself: 2.5 ttrs long
					case <-time.After(2500 * time.Millisecond):
						return nil
					case <-ctx.Done():
						return context.Cause(ctx)
					}
				}}
			runWorker(t, w)
			mustPush(t, c, client.PushJob{Topic: "w-long", ID: "long", TTR: time.Second})
			waitFinished(t, c, 6*time.Second, "long")
			if got := log.jobs(); len(got) != 1 {
				t.Errorf("deliveries %+v: the job was delivered again while its handler ran", got)
			}
		})

		t.Run("lost lease cancels the handler", func(t *testing.T) {
			t.Parallel()
			causes := make(chan error, 1)
			started := make(chan struct{})
			w := &client.Worker{Client: c, PollTimeout: serverBlockTimeout, Topics: []string{"w-lost"}, Logger: redistest.Logger(t),
				Handler: func(ctx context.Context, job client.Job) error {
					close(started)
					select {
					case <-ctx.Done():
						causes <- context.Cause(ctx)
					case <-time.After(5 * time.Second):
						causes <- nil
					}
					return ctx.Err()
				}}
			runWorker(t, w)
			mustPush(t, c, client.PushJob{Topic: "w-lost", ID: "lost", TTR: time.Second})
			<-started
			if err := c.Delete(context.Background(), "lost"); err != nil {
				t.Fatal(err)
			}
			if cause := <-causes; !errors.Is(cause, client.ErrLeaseLost) {
				t.Errorf("handler context ended with %v, want ErrLeaseLost", cause)
			}
		})

		t.Run("stop waits for handlers in flight", func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{})
			proceed := make(chan struct{})
			w := &client.Worker{Client: c, PollTimeout: serverBlockTimeout, Topics: []string{"w-stop"}, Concurrency: 2, Logger: redistest.Logger(t),
				Handler: func(ctx context.Context, job client.Job) error {
					close(started)
					<-proceed
					return ctx.Err() // nil: Run's cancel does not reach the handler
				}}
			stop := runWorker(t, w)
			mustPush(t, c, client.PushJob{Topic: "w-stop", ID: "s1", TTR: 30 * time.Second})
			<-started
			stopped := make(chan error, 1)
			go func() { stopped <- stop() }()
			select {
			case err := <-stopped:
				t.Fatalf("Run returned (%v) while a handler was still running", err)
			case <-time.After(300 * time.Millisecond):
			}
			close(proceed)
			if err := <-stopped; err != nil {
				t.Fatalf("Run: %v", err)
			}
			if info, err := c.Get(context.Background(), "s1"); err != nil || info != nil {
				t.Errorf("job after a graceful stop: %+v, %v; want finished", info, err)
			}
		})

		t.Run("stop timeout cancels slow handlers, which release", func(t *testing.T) {
			t.Parallel()
			started := make(chan struct{})
			causes := make(chan error, 1)
			w := &client.Worker{Client: c, PollTimeout: serverBlockTimeout, Topics: []string{"w-stoptimeout"}, Logger: redistest.Logger(t),
				StopTimeout: 100 * time.Millisecond, Backoff: func(int) time.Duration { return time.Hour },
				Handler: func(ctx context.Context, job client.Job) error {
					close(started)
					<-ctx.Done()
					causes <- context.Cause(ctx)
					return ctx.Err()
				}}
			stop := runWorker(t, w)
			mustPush(t, c, client.PushJob{Topic: "w-stoptimeout", ID: "st1", TTR: 30 * time.Second})
			<-started
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if cause := <-causes; !errors.Is(cause, client.ErrWorkerStopped) {
				t.Errorf("handler context ended with %v, want ErrWorkerStopped", cause)
			}
			info, err := c.Get(context.Background(), "st1")
			if err != nil || info == nil || info.State != client.StateReady || info.Attempts != 1 {
				t.Errorf("job after the stop: %+v, %v; want released, ready", info, err)
			}
		})
	})
}

func TestWorkerCancelDuringLongPoll(t *testing.T) {
	t.Parallel()
	url := startServer(t, redistest.Mini(t).Addr())
	polling := make(chan struct{}, 1)
	hc := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if r.URL.Path == "/pop" {
			select {
			case polling <- struct{}{}:
			default:
			}
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	w := &client.Worker{Client: client.New(url, client.WithHTTPClient(hc)), Topics: []string{"idle"}, Concurrency: 4,
		PollTimeout: serverBlockTimeout, Logger: redistest.Logger(t),
		Handler: func(ctx context.Context, job client.Job) error { return nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-polling
	canceled := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		if elapsed := time.Since(canceled); elapsed > 1500*time.Millisecond {
			t.Errorf("Run returned %v after the cancel", elapsed)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("Run still running 3s after its context was canceled in the middle of a long poll")
	}
}

func TestWorkerConfiguration(t *testing.T) {
	t.Parallel()
	handler := func(ctx context.Context, job client.Job) error { return nil }
	c := client.New("http://127.0.0.1:1")
	tests := []struct {
		name string
		w    client.Worker
	}{
		{"no client", client.Worker{Topics: []string{"t"}, Handler: handler}},
		{"no topics", client.Worker{Client: c, Handler: handler}},
		{"no handler", client.Worker{Client: c, Topics: []string{"t"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.w.Run(context.Background()); err == nil {
				t.Fatal("Run of an incomplete Worker succeeded")
			}
		})
	}

	t.Run("a refused token stops Run with the error", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"code":1,"message":"missing or wrong token","data":null}`)
		}))
		defer srv.Close()
		w := client.Worker{Client: client.New(srv.URL, client.WithToken("wrong")), Topics: []string{"t"}, Concurrency: 3, Handler: handler}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := w.Run(ctx)
		var apiErr *client.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatus != http.StatusUnauthorized {
			t.Fatalf("Run = %v, want the 401 APIError", err)
		}
	})

	t.Run("a poll timeout over the server's block timeout stops Run with the error", func(t *testing.T) {
		url := startServer(t, redistest.Mini(t).Addr())
		w := client.Worker{Client: client.New(url), Topics: []string{"t"}, PollTimeout: serverBlockTimeout + time.Second, Handler: handler}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := w.Run(ctx)
		if err == nil || !strings.Contains(err.Error(), "queue_block_timeout") || ctx.Err() != nil {
			t.Fatalf("Run = %v, want an error naming queue_block_timeout at once", err)
		}
	})

	t.Run("an unreachable server is retried until the context ends", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		dead := srv.URL
		srv.Close()
		w := client.Worker{Client: client.New(dead), Topics: []string{"t"}, Handler: handler, Logger: redistest.Logger(t)}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		if err := w.Run(ctx); err != nil {
			t.Fatalf("Run = %v, want nil after the context ended", err)
		}
	})
}

func TestDefaultBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempts int
		want     time.Duration
	}{
		{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second},
		{6, 32 * time.Second}, {7, time.Minute}, {8, time.Minute}, {1000, time.Minute},
	}
	for _, tc := range tests {
		if got := client.DefaultBackoff(tc.attempts); got != tc.want {
			t.Errorf("DefaultBackoff(%d) = %v, want %v", tc.attempts, got, tc.want)
		}
	}
}
