package metrics

import (
	"context"
	"github.com/gomodule/redigo/redis"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

func TestTopicLabelsAreCapped(t *testing.T) {
	t.Parallel()
	m := New(Options{MaxTopicLabels: 2}, nil)
	for _, topic := range []string{"a", "b", "c", "d", "a"} {
		m.JobsPushed(topic, 1)
	}
	for topic, want := range map[string]float64{"a": 2, "b": 1, OtherTopic: 2} {
		if got := testutil.ToFloat64(m.jobs.WithLabelValues("pushed", topic)); got != want {
			t.Errorf("pushed{topic=%q} = %v, want %v", topic, got, want)
		}
	}
}

func TestLoopErrorsAreCountedPerLoop(t *testing.T) {
	t.Parallel()
	m := New(Options{}, nil)
	for _, loop := range []string{delayqueue.LoopScanner, delayqueue.LoopScanner, delayqueue.LoopDeadSweeper} {
		m.LoopError(loop)
	}
	for loop, want := range map[string]float64{delayqueue.LoopScanner: 2, delayqueue.LoopDeadSweeper: 1, delayqueue.LoopDispatcher: 0} {
		if got := testutil.ToFloat64(m.loopErrors.WithLabelValues(loop)); got != want {
			t.Errorf("loop errors{loop=%q} = %v, want %v", loop, got, want)
		}
	}
}

func TestMetricsFromARealQueue(t *testing.T) {
	t.Parallel()
	mr := redistest.Mini(t)
	ro := redisconn.Options{Addr: mr.Addr(), DB: 1, ConnectTimeout: time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: time.Second}
	m := New(Options{SampleInterval: 20 * time.Millisecond}, nil)
	q := enginetest.StartWith(t, ro, delayqueue.Options{BucketSize: 1, BucketName: "b%d", QueueName: "q%s", Observer: m}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	sampling := m.WatchQueue(ctx, q)
	defer func() {
		cancel()
		<-sampling
	}()
	m.WatchPool(func() redis.PoolStats { return redis.PoolStats{ActiveCount: 3, IdleCount: 1} })

	if _, err := q.Push(ctx, delayqueue.Job{Topic: "order", ID: "1", TTR: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Push(ctx, delayqueue.Job{Topic: "order", ID: "2", TTR: time.Minute, Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if d, err := q.Pop(ctx, []string{"order"}, time.Second); err != nil || d == nil {
		t.Fatalf("pop = %v, %v", d, err)
	}
	m.ObserveRequest("/pop", 0, 3*time.Millisecond)

	deadline := time.Now().Add(5 * time.Second)
	for testutil.ToFloat64(m.jobsByState.WithLabelValues("order", "reserved")) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the reserved gauge never reached 1")
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv := httptest.NewServer(m.Handler())
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`delayqueue_jobs_total{event="pushed",topic="order"} 2`,
		`delayqueue_jobs_total{event="delivered",topic="order"} 1`,
		`delayqueue_jobs{state="delay",topic="order"} 1`,
		`delayqueue_jobs{state="reserved",topic="order"} 1`,
		`delayqueue_http_requests_total{endpoint="/pop",result="ok"} 1`,
		`delayqueue_held_pops 0`,
		`delayqueue_redis_pool_in_use`,
		`delayqueue_loop_errors_total{loop="scanner"} 0`,
		`delayqueue_loop_errors_total{loop="dispatcher"} 0`,
		`delayqueue_loop_errors_total{loop="dead-sweeper"} 0`,
		`delayqueue_loop_stale{loop="scanner"} 0`,
		`delayqueue_loop_stale{loop="dispatcher"} 0`,
		`delayqueue_loop_stale{loop="dead-sweeper"} 0`,
		`delayqueue_loop_last_round_age_seconds{loop="scanner"} `,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
