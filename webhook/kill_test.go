package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// childRedisEnv, when set, makes the test binary run a dispatcher against
// that Redis until it is killed (see TestMain).
const childRedisEnv = "WEBHOOK_TEST_CHILD_REDIS"

// runChildDispatcher is the second server instance of the kill -9 test.
func runChildDispatcher(addr string) int {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ro := testRedisOptions(addr)
	rdb, err := redisconn.New(ro, logger, nil)
	if err != nil {
		logger.Error("child redis", "err", err)
		return 1
	}
	q, err := delayqueue.New(rdb, queueOptions(ro), logger)
	if err != nil {
		logger.Error("child queue", "err", err)
		return 1
	}
	d, err := New(q, Options{Allow: allowLoopback}, logger)
	if err != nil {
		logger.Error("child dispatcher", "err", err)
		return 1
	}
	ctx := context.Background()
	go func() { _ = q.Run(ctx) }()
	_ = d.Run(ctx) // until killed
	return 0
}

// TestKillDuringCalls runs two instances, kills one with SIGKILL while it has
// calls in flight, and checks that every callback is received at least once
// and none twice within its lease.
func TestKillDuringCalls(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	const (
		jobs    = 30
		held    = 3 // calls the receiver holds, so the kill lands during them
		timeout = 1 // seconds; the lease is 1 s + the engine's 10 s margin
		lease   = 11 * time.Second
	)
	release := make(chan struct{})
	rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		answer(w, http.StatusOK, "")
	})
	logger, _ := testLogger(t)
	q, ro := newQueue(t, srv.Addr, logger)
	for i := range jobs {
		mustPush(t, q, delayqueue.Job{ID: fmt.Sprintf("k%02d", i), Retry: []int{1, 1},
			Callback: &delayqueue.Callback{URL: rc.url("/ok"), TimeoutSeconds: timeout}})
	}

	child := exec.Command(os.Args[0], "-test.run=^$")
	child.Env = append(os.Environ(), childRedisEnv+"="+srv.Addr)
	child.Stderr = t.Output()
	if err := child.Start(); err != nil {
		t.Fatalf("start the second instance: %v", err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	// The child alone runs at first: the calls in flight are its own.
	redistest.WaitFor(t, 10*time.Second, "the second instance to be calling", func() bool { return rc.inFlightNow() >= held })
	startDispatcher(t, q, ro, Options{Allow: allowLoopback}, logger)
	if err := child.Process.Kill(); err != nil {
		t.Fatalf("kill -9: %v", err)
	}
	_ = child.Wait()
	killed = true
	close(release)

	redistest.WaitFor(t, 25*time.Second, "every job finished", func() bool {
		for i := range jobs {
			if mustGet(t, q, fmt.Sprintf("k%02d", i)) != nil {
				return false
			}
		}
		return true
	})
	again := 0
	for i := range jobs {
		id := fmt.Sprintf("k%02d", i)
		calls := rc.callsFor(id)
		if len(calls) == 0 {
			t.Errorf("%s finished without being called", id)
			continue
		}
		sort.Slice(calls, func(a, b int) bool { return calls[a].At.Before(calls[b].At) })
		for j := 1; j < len(calls); j++ {
			again++
			if gap := calls[j].At.Sub(calls[j-1].At); gap < lease-time.Second {
				t.Errorf("%s called twice %s apart, within its %s lease (attempts %s and %s)", id, gap, lease, calls[j-1].Attempt, calls[j].Attempt)
			}
		}
	}
	if again < held {
		t.Errorf("%d calls were made again, want at least the %d the killed instance had in flight", again, held)
	}
}
