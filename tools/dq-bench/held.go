package main

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delay-queue/delay-queue/internal/pause"
	"github.com/delay-queue/delay-queue/internal/redisconn"
)

// heldHoldSeconds is the timeout of each held /pop: below the default
// queue_block_timeout (178), longer than the phase.
const heldHoldSeconds = 170

// heldTopicList is the j-th topic list of the held pops: a topic of its
// own, which the timed pushes target, and one of ten shared topics, so
// that waiters also wait on several topics at once.
func heldTopicList(j int) string { return fmt.Sprintf("%s,hshare%02d", heldTopic(j), j%10) }

func heldTopic(j int) string { return fmt.Sprintf("held%04d", j) }

// heldDelivery is a job a waiter got, and when its pop returned.
type heldDelivery struct {
	id string
	at time.Time
}

// runHeldPops holds s.heldPops concurrent /pop requests on the server,
// spread over s.heldTopicLists topic lists, then pushes s.heldSamples jobs
// one at a time to random lists' own topics and times each from before its
// push to the return of the pop that got it. It reports the Redis
// connections the server holds meanwhile, its RSS and the latencies.
func (b *bench) runHeldPops(ctx context.Context) error {
	if err := b.redis.flushDB(); err != nil {
		return err
	}
	idleConns, err := b.serverConns()
	if err != nil {
		return err
	}
	total, lists := b.s.heldPops, b.s.heldTopicLists
	// Each waiter needs its own connection: a held request occupies it.
	waiterClient, err := newAPIClient(b.s.httpClient, b.s.serverURL, total+64)
	if err != nil {
		return err
	}
	defer waiterClient.close()

	heldCtx, stopWaiters := context.WithCancel(ctx)
	var waiters sync.WaitGroup
	defer waiters.Wait()
	defer stopWaiters()

	var popsSent, popErrors, finishErrors atomic.Int64
	tracedCtx := withWroteHook(heldCtx, func() { popsSent.Add(1) })
	deliveries := make(chan heldDelivery, 64)
	for k := range total {
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			topics := heldTopicList(k % lists)
			for heldCtx.Err() == nil {
				got, err := waiterClient.pop(tracedCtx, topics, heldHoldSeconds)
				at := time.Now()
				if err != nil {
					if heldCtx.Err() != nil {
						return
					}
					if popErrors.Add(1) == 1 {
						b.logger.Warn("held pop failed", "err", err)
					}
					_ = pause.For(heldCtx, 100*time.Millisecond)
					continue
				}
				if got == nil {
					continue
				}
				select {
				case deliveries <- heldDelivery{id: got.ID, at: at}:
				case <-heldCtx.Done():
					return
				}
				if err := waiterClient.finish(heldCtx, got.ID); err != nil && heldCtx.Err() == nil {
					finishErrors.Add(1)
				}
			}
		}()
	}

	// The server has all of them once they are written and it had a moment
	// to read them; no API tells when a pop is registered.
	if err := waitFor(ctx, time.Minute, func() bool { return popsSent.Load() >= int64(total) }); err != nil {
		return fmt.Errorf("held-pops: only %d of %d pops sent: %w", popsSent.Load(), total, err)
	}
	_ = pause.For(ctx, b.s.heldSettle)
	if n := popErrors.Load(); n > 0 {
		return fmt.Errorf("held-pops: %d pops failed while they were being held", n)
	}

	conns, rss, err := b.serverFootprint()
	if err != nil {
		return err
	}
	b.logger.Info("held pops in place", "pops", total, "redis_conns_idle", sum(idleConns),
		"redis_conns_held", sum(conns), "rss_bytes", rss)

	cpu := b.markRedisCPU()
	body := jobBody()
	latencies := make([]time.Duration, 0, b.s.heldSamples)
	for k := range b.s.heldSamples {
		id := jobID('h', k)
		topic := heldTopic(rand.IntN(lists))
		sent := time.Now()
		if err := b.api.push(ctx, pushJob{Topic: topic, ID: id, TTR: jobTTR, Body: body}); err != nil {
			return fmt.Errorf("held-pops: push %d: %w", k, err)
		}
		got, err := awaitDelivery(ctx, deliveries, id, 10*time.Second)
		if err != nil {
			return fmt.Errorf("held-pops: push %d to %s: %w", k, topic, err)
		}
		latencies = append(latencies, got.Sub(sent))
	}

	cpuEnd := b.markRedisCPU()
	conns2, rss2, err := b.serverFootprint()
	if err != nil {
		return err
	}
	if sum(conns2) > sum(conns) {
		conns = conns2
	}
	rss = max(rss, rss2)
	if n := popErrors.Load() + finishErrors.Load(); n > 0 {
		b.logger.Warn("held-pops: requests failed during sampling", "pops", popErrors.Load(), "finishes", finishErrors.Load())
	}

	latency := summarize(latencies)
	b.report.value("held-pops-waiters", float64(total), "pops", nil)
	b.reportHeldConns(conns)
	if rss >= 0 {
		b.report.value("held-pops-rss", math.Round(float64(rss)/(1<<20)*10)/10, "MiB", atMost(512))
	} else {
		fmt.Fprintln(b.report.out, "held-pops-rss n/a no -server-pid")
	}
	b.report.value("held-pops-p50", roundMillis(latency.p50), "ms", nil)
	b.report.value("held-pops-p99", roundMillis(latency.p99), "ms", atMost(20))
	b.report.value("held-pops-max", roundMillis(latency.max), "ms", nil)
	b.reportRedisCPUBetween(phaseHeldPops, cpu, cpuEnd, len(latencies))

	stopWaiters()
	waiters.Wait()
	return b.redis.flushDB()
}

// serverFootprint reads the server's Redis connections on every primary
// and its RSS (-1 without -server-pid).
func (b *bench) serverFootprint() ([]int, int64, error) {
	conns, err := b.serverConns()
	if err != nil {
		return nil, 0, err
	}
	if b.s.serverPID == 0 {
		return conns, -1, nil
	}
	rss, err := processRSS(b.s.serverPID)
	if err != nil {
		return nil, 0, err
	}
	return conns, rss, nil
}

// serverConns counts the server's connections on every primary, as Redis
// lists them (CLIENT LIST): with -server-pid, those coming from the
// server's own sockets; without, every one but the tool's.
func (b *bench) serverConns() ([]int, error) {
	lists, err := b.redis.clientLists()
	if err != nil {
		return nil, err
	}
	// Read after the lists: a connection listed and since closed is no
	// longer counted, one opened since is not listed.
	var sockets *processSockets
	if b.s.serverPID != 0 {
		if sockets, err = readProcessSockets(b.s.serverPID); err != nil {
			return nil, err
		}
	}
	counts := make([]int, len(lists))
	for i, list := range lists {
		counts[i] = countServerClients(list, sockets)
	}
	return counts, nil
}

// reportHeldConns prints the server's Redis connections under the held
// pops against the documented budget, when the server recorded its
// partition count (this server before partitions did not: the figure is
// then held to the earlier goal of 64), and on a cluster per primary.
func (b *bench) reportHeldConns(conns []int) {
	const name = "held-pops-redis-conns"
	total := float64(sum(conns))
	partitions := b.redis.partitions()
	if partitions == 0 {
		b.report.value(name, total, "conns", atMost(64))
	} else {
		maxActive := b.s.maxActive
		if maxActive <= 0 {
			maxActive = redisconn.DefaultMaxActive
		}
		budget := connectionBudget(len(conns), maxActive, partitions)
		goal := atMost(float64(budget))
		fmt.Fprintf(b.report.out, "%s %d conns %s budget=%d primaries x %d max_active + %d partitions x %d loops\n",
			name, int(total), goal.annotate(total), len(conns), maxActive, partitions, loopsPerPartition(partitions))
	}
	if len(conns) > 1 {
		per := make([]string, len(conns))
		for i, n := range conns {
			per[i] = strconv.Itoa(n)
		}
		fmt.Fprintf(b.report.out, "%s-per-primary %s conns\n", name, strings.Join(per, ","))
	}
}

// connectionBudget is the most Redis connections one server process may
// hold, as the engine documents it: every primary's pool (redis.max_active
// each) and one dedicated connection per blocking dispatch loop. It never
// depends on the held pops.
func connectionBudget(primaries, maxActive, partitions int) int {
	return primaries*maxActive + partitions*loopsPerPartition(partitions)
}

// loopsPerPartition is the engine's count of blocking dispatch loops per
// partition (delayqueue/engine.go): about 4 in all, at least one each.
func loopsPerPartition(partitions int) int {
	return max(1, (4+partitions-1)/partitions)
}

// awaitDelivery waits for the delivery of id. A delivery of another id
// means a job of an earlier sample came twice; it is logged by the caller's
// figures only as a delay, so it is skipped here.
func awaitDelivery(ctx context.Context, deliveries <-chan heldDelivery, id string, limit time.Duration) (time.Time, error) {
	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		select {
		case d := <-deliveries:
			if d.id == id {
				return d.at, nil
			}
		case <-timer.C:
			return time.Time{}, fmt.Errorf("job %s not delivered to any waiter within %s", id, limit)
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		}
	}
}

// processRSS reads VmRSS of a process from /proc, in bytes.
func processRSS(pid int) (int64, error) {
	path := "/proc/" + strconv.Itoa(pid) + "/status"
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read server RSS: %w", err)
	}
	defer f.Close()
	return parseVmRSS(bufio.NewScanner(f), path)
}

// parseVmRSS finds "VmRSS:   1234 kB" in a /proc status file.
func parseVmRSS(scanner *bufio.Scanner, path string) (int64, error) {
	for scanner.Scan() {
		value, ok := strings.CutPrefix(scanner.Text(), "VmRSS:")
		if !ok {
			continue
		}
		fields := strings.Fields(value)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s: unexpected VmRSS line %q", path, scanner.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: VmRSS: %w", path, err)
		}
		return kb << 10, nil
	}
	if err := scanner.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return 0, fmt.Errorf("%s has no VmRSS line", path)
}

// waitFor polls cond until it holds, ctx ends or limit passes.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) error {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", limit)
		}
		if err := pause.For(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}
