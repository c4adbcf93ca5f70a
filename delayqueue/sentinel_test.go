package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// failoverLedger records what the producers had acknowledged and what the
// consumers were handed.
type failoverLedger struct {
	mu        sync.Mutex
	acked     map[string]bool
	delivered map[string]int
	// ackedSince counts acknowledgements of pushes started after the
	// primary was killed.
	ackedSince  int
	killed      time.Time
	pushErrors  map[string]int
	finishFails int
}

func newFailoverLedger() *failoverLedger {
	return &failoverLedger{acked: map[string]bool{}, delivered: map[string]int{}, pushErrors: map[string]int{}}
}

func (l *failoverLedger) push(id string, started time.Time, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.acked[id] = true
		if !l.killed.IsZero() && started.After(l.killed) {
			l.ackedSince++
		}
	case errors.Is(err, ErrNotReplicated):
		l.pushErrors["not replicated"]++
	case errors.Is(err, ErrUnavailable):
		l.pushErrors["unavailable"]++
	default:
		l.pushErrors[err.Error()]++
	}
}

// missing returns how many acknowledged jobs were never delivered, and one
// of them.
func (l *failoverLedger) missing() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, example := 0, ""
	for id := range l.acked {
		if l.delivered[id] == 0 {
			n++
			example = id
		}
	}
	return n, example
}

func (l *failoverLedger) counts() (acked, ackedSince int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked), l.ackedSince
}

// Kill -9 the primary while producers push with WaitReplicas = 1 and
// consumers pop: Sentinel promotes a replica, the queue follows it without
// a restart, and every push acknowledged before, during or after the
// failover is delivered.
//
// Three servers: with wait_replicas = 1, the promoted primary needs a
// replica of its own to acknowledge anything, so a second replica (which
// Sentinel repoints at the new primary) keeps the queue writable. Sentinel
// only: on a cluster, failover is the cluster's own, for the process
// tests.
func TestSentinelFailoverKeepsAcknowledgedJobs(t *testing.T) {
	redistest.Binary(t, "redis-sentinel")
	const masterName = "dqfailover"
	primary := redistest.Start(t, "appendonly yes")
	replicas := []*redistest.Server{
		redistest.StartReplica(t, primary, "appendonly yes"),
		redistest.StartReplica(t, primary, "appendonly yes"),
	}
	sentinel := redistest.StartSentinel(t, masterName, primary.Addr)
	sentinel.WaitReplicas(t, masterName, len(replicas))
	defer func() {
		if t.Failed() {
			t.Logf("sentinel log:\n%s", sentinel.Log())
		}
	}()

	ro := connectivityOptions()
	// A dead sentinel first: discovery must move on to the next one.
	ro.SentinelAddrs = []string{"127.0.0.1:" + strconv.Itoa(redistest.FreePort(t)), sentinel.Addr}
	ro.MasterName = masterName
	q := startQueue(t, ro, Options{BucketSize: 3, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: 2 * time.Second, ScanInterval: 200 * time.Millisecond,
		WaitReplicas: 1, WaitTimeout: 500 * time.Millisecond}, redistest.Logger(t))

	const topic = "failover"
	ledger := newFailoverLedger()
	var wg sync.WaitGroup
	stopProducers := make(chan struct{})
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stopProducers:
					return
				default:
				}
				id := fmt.Sprintf("p%d-%d", p, n)
				started := time.Now()
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				// Some jobs are delayed, so the scanners work across the
				// failover too.
				_, err := q.Push(ctx, Job{Topic: topic, ID: id, Delay: time.Duration(n%4) * 250 * time.Millisecond,
					TTR: 3 * time.Second, Body: id})
				cancel()
				ledger.push(id, started, err)
			}
		}()
	}
	consumersCtx, stopConsumers := context.WithCancel(context.Background())
	var consumers sync.WaitGroup
	var popErrors atomic.Int64
	for c := 0; c < 2; c++ {
		consumers.Add(1)
		go func() {
			defer consumers.Done()
			for consumersCtx.Err() == nil {
				ds, err := q.PopBatch(consumersCtx, []string{topic}, 50, time.Second)
				if err != nil {
					popErrors.Add(1)
				}
				if len(ds) == 0 {
					continue
				}
				ids := make([]string, len(ds))
				ledger.mu.Lock()
				for i, d := range ds {
					ids[i] = d.ID
					ledger.delivered[d.ID]++
				}
				ledger.mu.Unlock()
				// A finish lost in the failover only means a redelivery
				// after ttr.
				if _, err := q.FinishBatch(context.Background(), ids); err != nil {
					ledger.mu.Lock()
					ledger.finishFails++
					ledger.mu.Unlock()
				}
			}
		}()
	}
	defer func() {
		close(stopProducers)
		wg.Wait()
		stopConsumers()
		consumers.Wait()
	}()

	redistest.WaitFor(t, 10*time.Second, "300 acknowledged pushes before the failover", func() bool {
		acked, _ := ledger.counts()
		return acked >= 300
	})
	ledger.mu.Lock()
	ledger.killed = time.Now()
	ackedBefore := len(ledger.acked)
	ledger.mu.Unlock()
	primary.Stop() // kill -9
	t.Logf("%s: killed the primary %s after %d acknowledged pushes", ledger.killed.Format("15:04:05.000"), primary.Addr, ackedBefore)

	var newPrimary string
	redistest.WaitFor(t, 20*time.Second, "Sentinel to promote a replica", func() bool {
		addr, err := redis.Strings(sentinel.Do("SENTINEL", "get-master-addr-by-name", masterName))
		if err != nil || len(addr) != 2 {
			return false
		}
		newPrimary = addr[0] + ":" + addr[1]
		return newPrimary != primary.Addr
	})
	t.Logf("sentinel promoted %s after %v", newPrimary, time.Since(ledger.killed).Round(time.Millisecond))
	redistest.WaitFor(t, 30*time.Second, "100 acknowledged pushes started after the kill", func() bool {
		_, since := ledger.counts()
		return since >= 100
	})
	t.Logf("pushes acknowledged again %v after the kill", time.Since(ledger.killed).Round(time.Millisecond))

	// Stop the producers, then wait for the consumers to be handed every
	// acknowledged job.
	close(stopProducers)
	wg.Wait()
	stopProducers = make(chan struct{})
	deadline := time.Now().Add(15 * time.Second)
	for {
		missing, example := ledger.missing()
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			info, err := q.Get(context.Background(), example)
			t.Fatalf("%d acknowledged jobs were never delivered; %s among them, stored as %+v (%v)", missing, example, info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	ledger.mu.Lock()
	defer ledger.mu.Unlock()
	redelivered := 0
	for _, n := range ledger.delivered {
		if n > 1 {
			redelivered++
		}
	}
	t.Logf("acknowledged %d pushes (%d before the kill, %d started after it); failed pushes %v; "+
		"%d jobs delivered, %d more than once; %d failed finishes; %d failed pops",
		len(ledger.acked), ackedBefore, ledger.ackedSince, ledger.pushErrors,
		len(ledger.delivered), redelivered, ledger.finishFails, popErrors.Load())
}
