package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// runPush pushes ready jobs (delay 0) one per request on s.clients
// clients. They stay in readyTopic for pop-finish.
func (b *bench) runPush(ctx context.Context) error {
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	cpu := b.markRedisCPU()
	ok, took, err := b.pushReady(ctx)
	if err != nil {
		return fmt.Errorf("push: %w", err)
	}
	b.readyJobs = ok
	b.pushRate = float64(ok) / took.Seconds()
	b.report.throughput(phasePush, b.pushRate, atLeast(0.27))
	b.reportRedisCPU(phasePush, cpu, ok)
	return nil
}

// runPopFinish pops and finishes every job of readyTopic on s.clients
// consumers, each doing pop then finish. The clock stops at the last
// finish.
func (b *bench) runPopFinish(ctx context.Context) error {
	if b.readyJobs == 0 {
		// Run alone: fill the topic first, untimed.
		if err := b.redis.flushDB(); err != nil {
			return err
		}
		ok, _, err := b.pushReady(ctx)
		if err != nil {
			return fmt.Errorf("fill ready jobs: %w", err)
		}
		b.readyJobs = ok
	}
	total := b.readyJobs
	b.readyJobs = 0
	cpu := b.markRedisCPU()
	start := time.Now()
	var lastFinish time.Time
	if b.s.loop {
		ctx, cancel := context.WithTimeout(ctx, drainDeadline(total))
		defer cancel()
		var err error
		lastFinish, err = popFinishLoop(ctx, b.s.serverURL, readyTopic, total, b.s.clients)
		if err != nil {
			return fmt.Errorf("pop-finish: %w", err)
		}
	} else {
		drained, err := b.drain(ctx, readyTopic, total, b.s.clients, 0, nil)
		if err != nil {
			return fmt.Errorf("pop-finish: %w", err)
		}
		lastFinish = drained.lastFinish
	}
	b.report.throughput(phasePopFinish, float64(total)/lastFinish.Sub(start).Seconds(), atLeast(0.15))
	b.reportRedisCPU(phasePopFinish, cpu, total)
	return nil
}

// pushReady pushes s.pushJobs ready jobs (delay 0) of readyTopic, one per
// request on s.clients clients, on the event loop or on goroutines.
func (b *bench) pushReady(ctx context.Context) (int, time.Duration, error) {
	body := jobBody()
	makeJob := func(i int) pushJob {
		return pushJob{Topic: readyTopic, ID: jobID('p', i), TTR: jobTTR, Body: body}
	}
	if b.s.loop {
		return pushLoop(ctx, b.s.serverURL, b.s.clients, b.s.pushJobs, makeJob)
	}
	return b.pushMany(ctx, b.s.clients, b.s.pushJobs, makeJob)
}

// drainDeadline is how long draining total jobs may take: long enough for
// a slow server, bounded so that a lost job does not hang the run.
func drainDeadline(total int) time.Duration {
	return time.Minute + time.Duration(total)*time.Millisecond
}

// runPushDelayed is push with a one-hour delay: the jobs go to a bucket
// instead of a ready list. Not one of the documented figures; it shows
// whether delayed pushes cost more.
func (b *bench) runPushDelayed(ctx context.Context) error {
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	body := jobBody()
	cpu := b.markRedisCPU()
	ok, took, err := b.pushMany(ctx, b.s.clients, b.s.pushJobs, func(i int) pushJob {
		return pushJob{Topic: "bench-dl", ID: jobID('d', i), Delay: 3600, TTR: jobTTR, Body: body}
	})
	if err != nil {
		return fmt.Errorf("push-delayed: %w", err)
	}
	b.report.throughput(phasePushDelayed, float64(ok)/took.Seconds(), nil)
	b.reportRedisCPU(phasePushDelayed, cpu, ok)
	return b.redis.flushDB()
}

// pushBatches pushes total ready jobs of topic in batches of s.batchSize
// on s.batchClients clients.
func (b *bench) pushBatches(ctx context.Context, topic string, tag byte, total int) (int, time.Duration, error) {
	body := jobBody()
	batches := (total + b.s.batchSize - 1) / b.s.batchSize
	start := time.Now()
	ok, err := forEach(ctx, b.s.batchClients, batches, func(ctx context.Context, n int) error {
		first := n * b.s.batchSize
		last := min(first+b.s.batchSize, total)
		jobs := make([]pushJob, 0, last-first)
		for i := first; i < last; i++ {
			jobs = append(jobs, pushJob{Topic: topic, ID: jobID(tag, i), TTR: jobTTR, Body: body})
		}
		_, err := b.api.pushBatch(ctx, jobs)
		return err
	})
	took := time.Since(start)
	pushed := ok * b.s.batchSize
	if ok == batches {
		pushed = total
	}
	return pushed, took, err
}

func (b *bench) runPushBatch(ctx context.Context) error {
	support, err := b.probeBatches(ctx)
	if err != nil {
		return err
	}
	if support.push != nil {
		b.report.unsupported(phasePushBatch)
		return nil
	}
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	cpu := b.markRedisCPU()
	pushed, took, err := b.pushBatches(ctx, "bench-bp", 'k', b.s.batchJobs)
	if err != nil {
		return fmt.Errorf("push-batch: %w", err)
	}
	b.report.throughput(phasePushBatch, float64(pushed)/took.Seconds(), atLeast(1.0))
	b.reportRedisCPU(phasePushBatch, cpu, pushed)
	return b.redis.flushDB()
}

func (b *bench) runPopBatch(ctx context.Context) error {
	support, err := b.probeBatches(ctx)
	if err != nil {
		return err
	}
	if support.pop != nil {
		b.report.unsupported(phasePopBatch)
		return nil
	}
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	const topic = "bench-bo"
	var pushed int
	if support.push == nil {
		pushed, _, err = b.pushBatches(ctx, topic, 'o', b.s.batchJobs)
	} else {
		body := jobBody()
		pushed, _, err = b.pushMany(ctx, b.s.clients, b.s.batchJobs, func(i int) pushJob {
			return pushJob{Topic: topic, ID: jobID('o', i), TTR: jobTTR, Body: body}
		})
	}
	if err != nil {
		return fmt.Errorf("fill ready jobs: %w", err)
	}
	cpu := b.markRedisCPU()
	start := time.Now()
	drained, err := b.drain(ctx, topic, pushed, b.s.clients, b.s.popCount, nil)
	if err != nil {
		return fmt.Errorf("pop-batch: %w", err)
	}
	b.report.throughput(phasePopBatch, float64(pushed)/drained.lastFinish.Sub(start).Seconds(), atLeast(0.5))
	b.reportRedisCPU(phasePopBatch, cpu, pushed)
	return b.redis.flushDB()
}

// drainTimes says when a drain's last pop returned and its last finish
// was acknowledged.
type drainTimes struct {
	lastPop, lastFinish time.Time
}

// drain runs consumers on topic until total jobs have been popped and
// finished, each consumer popping (count jobs at a time when count > 0,
// else single pops) then finishing what it got. onPop, when not nil, sees
// every delivery and the time its pop returned. drain returns once every
// consumer has stopped, so that no request of this phase runs into the
// next.
func (b *bench) drain(ctx context.Context, topic string, total, consumers, count int,
	onPop func(d delivery, at time.Time)) (drainTimes, error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	var popped, finished, failures atomic.Int64
	var lastPop, lastFinish atomic.Int64 // unix ns
	done := make(chan struct{})
	var doneOnce sync.Once
	errs := make(chan error, 1)
	deadline := time.NewTimer(drainDeadline(total))
	defer deadline.Stop()

	record := func(got []delivery, at time.Time) {
		for _, d := range got {
			if onPop != nil {
				onPop(d, at)
			}
		}
		if popped.Add(int64(len(got))) >= int64(total) {
			lastPop.CompareAndSwap(0, at.UnixNano())
		}
	}
	finishedSome := func(n int) {
		if finished.Add(int64(n)) >= int64(total) {
			lastFinish.CompareAndSwap(0, time.Now().UnixNano())
			doneOnce.Do(func() { close(done) })
		}
	}
	fail := func(err error) {
		if ctx.Err() != nil {
			return
		}
		if failures.Add(1) == maxFailures {
			errs <- err
		}
	}

	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && popped.Load() < int64(total) {
				if count > 0 {
					got, err := b.api.popBatch(ctx, topic, 1, count)
					if err != nil {
						fail(err)
						continue
					}
					record(got, time.Now())
					if len(got) == 0 {
						continue
					}
					ids := make([]string, len(got))
					for i, d := range got {
						ids[i] = d.ID
					}
					if err := b.api.finishBatch(ctx, ids); err != nil {
						fail(err)
						continue
					}
					finishedSome(len(ids))
					continue
				}
				got, err := b.api.pop(ctx, topic, 1)
				if err != nil {
					fail(err)
					continue
				}
				if got == nil {
					continue
				}
				record([]delivery{*got}, time.Now())
				if err := b.api.finish(ctx, got.ID); err != nil {
					fail(err)
					continue
				}
				finishedSome(1)
			}
		}()
	}
	select {
	case <-done:
	case err := <-errs:
		return drainTimes{}, fmt.Errorf("%d requests failed, the last: %w", failures.Load(), err)
	case <-deadline.C:
		return drainTimes{}, fmt.Errorf("gave up: %d of %d jobs popped, %d finished", popped.Load(), total, finished.Load())
	case <-ctx.Done():
		return drainTimes{}, ctx.Err()
	}
	if n := failures.Load(); n > 0 {
		b.logger.Warn("some requests failed", "topic", topic, "failures", n)
	}
	return drainTimes{lastPop: time.Unix(0, lastPop.Load()), lastFinish: time.Unix(0, lastFinish.Load())}, nil
}
