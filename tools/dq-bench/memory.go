package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// memoryTopics is how many 8-byte topics the memory phase's jobs use.
const memoryTopics = 10

// runMemory pushes s.memoryJobs delayed jobs (one hour: they stay in the
// buckets) with 100-byte bodies, 14-byte ids and 8-byte topics on
// s.memoryClients clients, and reports Redis' used_memory delta per job.
func (b *bench) runMemory(ctx context.Context) error {
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	before, err := b.redis.usedMemory()
	if err != nil {
		return err
	}
	body := jobBody()
	total := b.s.memoryJobs
	cpu := b.markRedisCPU()
	ok, _, err := b.pushMany(ctx, b.s.memoryClients, total, func(i int) pushJob {
		topic := fmt.Sprintf("mtopic%02d", i%memoryTopics)
		return pushJob{Topic: topic, ID: jobID('m', i), Delay: 3600, TTR: jobTTR, Body: body}
	})
	if err != nil {
		return fmt.Errorf("redis-bytes-per-job: push: %w", err)
	}
	if ok != total {
		return fmt.Errorf("redis-bytes-per-job: only %d of %d pushes acknowledged", ok, total)
	}
	cpuEnd := b.markRedisCPU()
	// Let the server's connections go idle, so that their buffers do not
	// count.
	time.Sleep(200 * time.Millisecond)
	after, err := b.redis.usedMemory()
	if err != nil {
		return err
	}
	keys, err := b.redis.dbSize()
	if err != nil {
		return err
	}
	b.logger.Info("redis memory", "used_memory_before", before, "used_memory_after", after, "jobs", total, "keys", keys)
	perJob := float64(after-before) / float64(total)
	b.report.value(phaseMemory, math.Round(perJob), "bytes", atMost(450))
	b.reportRedisCPUBetween(phaseMemory, cpu, cpuEnd, ok)
	return b.redis.flushDB()
}
