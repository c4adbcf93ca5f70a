package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Job shapes of every phase: 14-byte ids, 8-byte topics and 100-byte
// bodies, the shape the documented memory figure is measured with.
const (
	jobBodyBytes = 100
	jobTTR       = 60 // seconds: longer than any phase, so nothing is redelivered mid-phase
)

// jobBody is the 100-byte body every pushed job carries.
func jobBody() string { return strings.Repeat("b", jobBodyBytes) }

// jobID builds a 14-byte id: a one-letter phase tag and 13 digits.
func jobID(tag byte, n int) string {
	id := []byte{tag, '0', '0', '0', '0', '0', '0', '0', '0', '0', '0', '0', '0', '0'}
	digits := strconv.Itoa(n)
	if len(digits) > 13 {
		return string(tag) + digits
	}
	copy(id[len(id)-len(digits):], digits)
	return string(id)
}

// bench runs the phases against one server and its Redis.
type bench struct {
	s      settings
	api    *apiClient
	redis  *redisInspector
	report *reporter
	logger *slog.Logger

	// Carried from one phase to the next.
	readyJobs  int     // ready jobs the push phase left in readyTopic
	pushRate   float64 // jobs/s of the push phase, to size the burst's lead time
	batchProbe *batchSupport
}

// batchSupport is what the server answered to the batch forms (jobs on
// /push, count on /pop, ids on /finish); a nil error means supported.
type batchSupport struct {
	push error // {"jobs":[...]} on /push
	pop  error // "count" on /pop, then {"ids":[...]} on /finish
}

const readyTopic = "bench-rd"

func newBench(s settings, out io.Writer, logger *slog.Logger) (*bench, error) {
	r, err := dialRedis(s.redisAddr, s.redisDB, s.redisPassword, s.keyPrefix)
	if err != nil {
		return nil, err
	}
	api, err := newAPIClient(s.httpClient, s.serverURL, 4*s.clients+s.memoryClients+s.batchClients)
	if err != nil {
		_ = r.close()
		return nil, err
	}
	return &bench{
		s:      s,
		api:    api,
		redis:  r,
		report: &reporter{out: out, setRPS: s.setRPS},
		logger: logger,
	}, nil
}

func (b *bench) close() {
	b.api.close()
	_ = b.redis.close()
}

// run checks that the server answers, then runs the selected phases in
// order. A failed phase is reported as "n/a failed" and the others still
// run; run then returns an error naming the failed phases.
func (b *bench) run(ctx context.Context) error {
	if err := b.checkServer(ctx); err != nil {
		return err
	}
	if b.s.setRPS > 0 {
		b.report.value("redis-set", b.s.setRPS, "req/s", nil)
	}
	phases := map[string]func(context.Context) error{
		phasePush:        b.runPush,
		phaseFloor:       b.runFloor,
		phasePopFinish:   b.runPopFinish,
		phasePushDelayed: b.runPushDelayed,
		phasePushBatch:   b.runPushBatch,
		phasePopBatch:    b.runPopBatch,
		phaseLateness:    b.runLateness,
		phaseBurst:       func(ctx context.Context) error { return b.runBurst(ctx, true) },
		phaseBurstSingle: func(ctx context.Context) error { return b.runBurst(ctx, false) },
		phaseMemory:      b.runMemory,
		phaseHeldPops:    b.runHeldPops,
		phaseLifecycle:   b.runLifecycle,
	}
	var failed []string
	for _, name := range allPhases() {
		if !slices.Contains(b.s.phases, name) {
			continue
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		profile := b.startProfile()
		err := phases[name](ctx)
		if err != nil {
			b.logger.Error("phase failed", "phase", name, "err", err)
			b.report.failed(name)
			failed = append(failed, name)
			continue
		}
		if name != phaseFloor { // the profile reads the queue server, idle then
			b.logProfile(name, profile)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("phases failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// checkServer makes sure both the server and its Redis answer, reads the
// layout the server recorded, names the primaries, and starts from an
// empty db.
func (b *bench) checkServer(ctx context.Context) error {
	probeCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	// A server answers job calls once it has recorded its layout (after
	// migrating older data), so the layout is read after this.
	if _, err := b.api.exists(probeCtx, "dq-bench-probe"); err != nil {
		return fmt.Errorf("server at %s does not answer /get: %w", b.s.serverURL, err)
	}
	if err := b.redis.readLayout(); err != nil {
		return err
	}
	fmt.Fprintf(b.report.out, "redis-primaries %d nodes %s\n", len(b.redis.nodes), strings.Join(b.redis.addrs(), ","))
	if n := b.redis.partitions(); n > 0 {
		b.report.value("redis-partitions", float64(n), "partitions", nil)
	} else {
		fmt.Fprintln(b.report.out, "redis-partitions n/a no layout record")
	}
	return b.redis.flushDB()
}

// maxFailures is how many failed requests a phase tolerates before it
// gives up: a few may be noise, thousands mean the figure is meaningless.
const maxFailures = 50

// forEach runs fn(i) for i in [0,total) on workers goroutines, each taking
// the next index. It stops early once maxFailures calls have failed, and
// returns the number of successes and the first error.
func forEach(ctx context.Context, workers, total int, fn func(ctx context.Context, i int) error) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next, succeeded, failures atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	for range min(workers, total) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= total {
					return
				}
				if err := fn(ctx, i); err != nil {
					if ctx.Err() != nil {
						return
					}
					errOnce.Do(func() { firstErr = err })
					if failures.Add(1) >= maxFailures {
						cancel()
					}
					continue
				}
				succeeded.Add(1)
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	if n := failures.Load(); n > 0 {
		firstErr = fmt.Errorf("%d requests failed, first: %w", n, firstErr)
	}
	return int(succeeded.Load()), firstErr
}

// pushMany pushes total jobs built by makeJob on workers clients and returns
// how many were acknowledged and how long it took.
func (b *bench) pushMany(ctx context.Context, workers, total int, makeJob func(i int) pushJob) (int, time.Duration, error) {
	return pushWith(ctx, b.api, workers, total, makeJob)
}

// pushWith is pushMany with client.
func pushWith(ctx context.Context, client *apiClient, workers, total int, makeJob func(i int) pushJob) (int, time.Duration, error) {
	start := time.Now()
	ok, err := forEach(ctx, workers, total, func(ctx context.Context, i int) error {
		return client.push(ctx, makeJob(i))
	})
	return ok, time.Since(start), err
}

// probeBatches finds out, once, whether the server has the batch forms
// (older builds have not). The probe jobs live in their own topic and are
// deleted by the next FLUSHDB.
func (b *bench) probeBatches(ctx context.Context) (*batchSupport, error) {
	if b.batchProbe != nil {
		return b.batchProbe, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	support := &batchSupport{}
	const topic = "bench-pr"
	body := jobBody()
	jobs := []pushJob{
		{Topic: topic, ID: jobID('q', 1), TTR: jobTTR, Body: body},
		{Topic: topic, ID: jobID('q', 2), TTR: jobTTR, Body: body},
	}
	if _, err := b.api.pushBatch(ctx, jobs); err != nil {
		support.push = err
	} else {
		for _, j := range jobs {
			found, err := b.api.exists(ctx, j.ID)
			if err != nil {
				return nil, fmt.Errorf("probe batch push: %w", err)
			}
			if !found {
				support.push = fmt.Errorf("batch push answered code 0 but job %s does not exist: %w", j.ID, errBatchShape)
				break
			}
		}
	}

	// Pop with count needs ready jobs, pushed singly so that this probe
	// does not depend on the batch push.
	popJobs := []pushJob{
		{Topic: topic, ID: jobID('q', 3), TTR: jobTTR, Body: body},
		{Topic: topic, ID: jobID('q', 4), TTR: jobTTR, Body: body},
	}
	for _, j := range popJobs {
		if err := b.api.push(ctx, j); err != nil {
			return nil, fmt.Errorf("probe batch pop: push: %w", err)
		}
	}
	got, err := b.api.popBatch(ctx, topic, 1, 2)
	switch {
	case err != nil:
		support.pop = err
	case len(got) == 0:
		support.pop = errors.New("pop with count returned no job although jobs were ready")
	default:
		ids := make([]string, len(got))
		for i, d := range got {
			ids[i] = d.ID
		}
		if err := b.api.finishBatch(ctx, ids); err != nil {
			support.pop = fmt.Errorf("pop with count works, finish with ids does not: %w", err)
			break
		}
		for _, id := range ids {
			found, err := b.api.exists(ctx, id)
			if err != nil {
				return nil, fmt.Errorf("probe batch finish: %w", err)
			}
			if found {
				support.pop = fmt.Errorf("finish with ids answered code 0 but job %s still exists: %w", id, errBatchShape)
				break
			}
		}
	}
	if err := b.redis.flushDB(); err != nil {
		return nil, err
	}
	b.logger.Info("batch support probed", "push_batch", errText(support.push), "pop_batch", errText(support.pop))
	b.batchProbe = support
	return support, nil
}

func errText(err error) string {
	if err == nil {
		return "supported"
	}
	return err.Error()
}
