package main

import (
	"context"
	"fmt"
	"time"

	"github.com/delay-queue/delay-queue/internal/pause"
)

// lifecycleDelay is the delay of the lifecycle phase's jobs: each goes
// through the delayed state and the scanner's move to ready, as a delayed
// job in production does.
const lifecycleDelay = time.Second

// runLifecycle measures what a whole delayed job costs: s.lifecycleJobs
// single pushes with a delay of 1 s on s.clients clients, then, once the
// last is due, single pops and finishes of every one of them. Its Redis
// CPU per job covers push, the move to ready, pop and finish. The two
// halves' throughputs are reported too; the wait between them is not
// counted in either.
func (b *bench) runLifecycle(ctx context.Context) error {
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	const topic = "bench-lc"
	total := b.s.lifecycleJobs
	body := jobBody()
	makeJob := func(i int) pushJob {
		return pushJob{Topic: topic, ID: jobID('c', i), Delay: int64(lifecycleDelay / time.Second), TTR: jobTTR, Body: body}
	}
	cpu := b.markRedisCPU()
	var ok int
	var took time.Duration
	var err error
	if b.s.loop {
		ok, took, err = pushLoop(ctx, b.s.serverURL, b.s.clients, total, makeJob)
	} else {
		ok, took, err = b.pushMany(ctx, b.s.clients, total, makeJob)
	}
	if err != nil {
		return fmt.Errorf("lifecycle: push: %w", err)
	}
	if ok != total {
		return fmt.Errorf("lifecycle: only %d of %d pushes acknowledged", ok, total)
	}
	// The last push was acknowledged a moment ago, so its job is due
	// within lifecycleDelay; a little more lets the scanner move it.
	if err := pause.For(ctx, lifecycleDelay+100*time.Millisecond); err != nil {
		return err
	}

	start := time.Now()
	var lastFinish time.Time
	if b.s.loop {
		loopCtx, cancel := context.WithTimeout(ctx, drainDeadline(total))
		defer cancel()
		lastFinish, err = popFinishLoop(loopCtx, b.s.serverURL, topic, total, b.s.clients)
	} else {
		var drained drainTimes
		drained, err = b.drain(ctx, topic, total, b.s.clients, 0, nil)
		lastFinish = drained.lastFinish
	}
	if err != nil {
		return fmt.Errorf("lifecycle: pop-finish: %w", err)
	}
	b.report.throughput(phaseLifecycle+"-push", float64(ok)/took.Seconds(), nil)
	b.report.throughput(phaseLifecycle+"-pop-finish", float64(total)/lastFinish.Sub(start).Seconds(), nil)
	b.reportRedisCPU(phaseLifecycle, cpu, total)
	return b.redis.flushDB()
}
