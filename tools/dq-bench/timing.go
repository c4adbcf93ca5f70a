package main

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"
)

// lateness phase: the first job is due this long after its push, so the
// consumers are already waiting when it is.
const latenessMinDelay = 300 * time.Millisecond

// runLateness pushes s.latenessJobs jobs whose delays spread evenly over
// s.latenessSpread while s.clients consumers wait on their topic, and
// reports how late each pop returned.
//
// The due time is taken as the moment before the push request was sent plus
// the delay. The server counts the delay from when it runs the push, a
// little later, so the figures overstate lateness by the push's transit
// time (conservative); a negative lateness is therefore a real early
// delivery.
func (b *bench) runLateness(ctx context.Context) error {
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	const topic = "bench-lt"
	total := b.s.latenessJobs
	dueAt := make([]atomic.Int64, total) // unix ns
	poppedAt := make([]atomic.Int64, total)
	var redelivered atomic.Int64

	cpu := b.markRedisCPU()
	drained := make(chan error, 1)
	go func() {
		_, err := b.drain(ctx, topic, total, b.s.clients, 0, func(d delivery, at time.Time) {
			i, err := strconv.Atoi(d.ID[1:])
			if err != nil || i < 0 || i >= total {
				return
			}
			if !poppedAt[i].CompareAndSwap(0, at.UnixNano()) {
				redelivered.Add(1)
			}
		})
		drained <- err
	}()

	body := jobBody()
	spread := b.s.latenessSpread
	_, _, err := b.pushMany(ctx, b.s.clients, total, func(i int) pushJob {
		delay := latenessMinDelay + time.Duration(int64(spread)*int64(i)/int64(total))
		dueAt[i].Store(time.Now().Add(delay).UnixNano())
		return pushJob{Topic: topic, ID: jobID('l', i), TTR: jobTTR, Body: body}.withDelayMS(delay.Milliseconds())
	})
	if err != nil {
		return fmt.Errorf("lateness: push: %w", err)
	}
	if err := <-drained; err != nil {
		return fmt.Errorf("lateness: %w", err)
	}
	if n := redelivered.Load(); n > 0 {
		b.logger.Warn("lateness: jobs delivered more than once within their ttr", "count", n)
	}

	lateness := make([]time.Duration, 0, total)
	for i := range total {
		lateness = append(lateness, time.Duration(poppedAt[i].Load()-dueAt[i].Load()))
	}
	sum := summarize(lateness)
	b.report.value("lateness-p50", roundMillis(sum.p50), "ms", nil)
	b.report.value("lateness-p99", roundMillis(sum.p99), "ms", atMost(10))
	b.report.value("lateness-min", roundMillis(sum.min), "ms", atLeast(0))
	b.report.value("lateness-max", roundMillis(sum.max), "ms", nil)
	b.reportRedisCPU(phaseLateness, cpu, total)
	return b.redis.flushDB()
}

// roundMillis gives a duration in ms with 0.1 ms precision.
func roundMillis(d time.Duration) float64 { return math.Round(millis(d)*10) / 10 }

// runBurst pushes s.burstJobs jobs all due at the start of the same
// second, with s.clients consumers waiting on their topic, and reports the
// time from that second until the last job was popped. batch selects
// pops with "count" and finishes with "ids" (burst-drain) over single ones
// (burst-drain-single).
func (b *bench) runBurst(ctx context.Context, batch bool) error {
	name, count, goal := phaseBurstSingle, 0, atMost(8000)
	if batch {
		name, count, goal = phaseBurst, b.s.popCount, atMost(3000)
		support, err := b.probeBatches(ctx)
		if err != nil {
			return err
		}
		if support.pop != nil {
			b.report.unsupported(name)
			return nil
		}
	}
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	const topic = "bench-bu"
	total := b.s.burstJobs

	// Every push must be done before the burst second begins: lead time is
	// half again the time the push phase's rate predicts, plus margin.
	rate := b.pushRate
	if rate <= 0 {
		rate = 2000 // push did not run: a cautious guess
	}
	lead := time.Duration(1.5*float64(total)/rate*float64(time.Second)) + 2*time.Second
	burstSecond := time.Now().Add(lead).Truncate(time.Second).Add(time.Second)

	var early atomic.Int64
	cpu := b.markRedisCPU()
	drained := make(chan drainResult, 1)
	go func() {
		times, err := b.drain(ctx, topic, total, b.s.clients, count, func(_ delivery, at time.Time) {
			if at.Before(burstSecond) {
				early.Add(1)
			}
		})
		drained <- drainResult{times, err}
	}()

	body := jobBody()
	var lateSends atomic.Int64
	_, _, err := b.pushMany(ctx, b.s.clients, total, func(i int) pushJob {
		delay := time.Until(burstSecond)
		if delay <= 0 {
			lateSends.Add(1)
			delay = 0
		}
		// Rounded up: never due before the burst second.
		delayMS := (delay + time.Millisecond - 1).Milliseconds()
		return pushJob{Topic: topic, ID: jobID('u', i), TTR: jobTTR, Body: body}.withDelayMS(delayMS)
	})
	if err != nil {
		return fmt.Errorf("%s: push: %w", name, err)
	}
	if pushedBy := time.Now(); pushedBy.After(burstSecond) {
		b.logger.Warn("burst: pushes were still running when the burst second began; the figure includes push time",
			"phase", name, "late_by", pushedBy.Sub(burstSecond).Round(time.Millisecond), "late_sends", lateSends.Load())
	}
	result := <-drained
	if result.err != nil {
		return fmt.Errorf("%s: %w", name, result.err)
	}
	if n := early.Load(); n > 0 {
		b.logger.Warn("burst: jobs popped before their due second", "phase", name, "count", n)
	}
	b.report.value(name, math.Round(millis(result.times.lastPop.Sub(burstSecond))), "ms", goal)
	b.reportRedisCPU(name, cpu, total)
	return b.redis.flushDB()
}

type drainResult struct {
	times drainTimes
	err   error
}
