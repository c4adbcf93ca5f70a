package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// maxPrimaryShare is the balance goal: on a cluster, no primary
// takes more than this share of a phase's Redis CPU.
const maxPrimaryShare = 0.40

// redisCPUMark is the CPU clocks of every primary at the start of the part
// of a phase that is measured.
type redisCPUMark struct {
	seconds []float64
	err     error
}

// markRedisCPU notes the primaries' CPU clocks. A failure costs only the
// figure, which is then reported as n/a.
func (b *bench) markRedisCPU() redisCPUMark {
	seconds, err := b.redis.cpuSeconds()
	return redisCPUMark{seconds: seconds, err: err}
}

// reportRedisCPU prints the Redis CPU per job since mark: the
// used_cpu_user + used_cpu_sys delta summed over the primaries, divided by
// the jobs the phase handled, and on a cluster each primary's share of it.
// The mark should be taken after the phase's set-up (the FLUSHDB before
// it) and this called before its clean-up, so that neither counts.
func (b *bench) reportRedisCPU(phase string, mark redisCPUMark, jobs int) {
	b.reportRedisCPUBetween(phase, mark, b.markRedisCPU(), jobs)
}

// reportRedisCPUBetween is reportRedisCPU for the CPU used from start to
// end, for a phase that reports after a pause that should not count.
func (b *bench) reportRedisCPUBetween(phase string, start, end redisCPUMark, jobs int) {
	name := phase + "-redis-cpu"
	err := errors.Join(start.err, end.err)
	if err == nil && len(start.seconds) != len(end.seconds) {
		err = fmt.Errorf("%d primaries at the start, %d at the end", len(start.seconds), len(end.seconds))
	}
	if err != nil {
		b.logger.Warn("redis cpu not measured", "phase", phase, "err", err)
		fmt.Fprintf(b.report.out, "%s n/a redis cpu not read\n", name)
		return
	}
	perJob, shares := redisCPUPerJob(start.seconds, end.seconds, jobs)
	b.report.redisCPU(name, perJob, shares)
}

// redisCPUPerJob is the CPU delta from before to after (seconds, per
// primary), summed and divided by jobs, in µs; and each primary's share of
// the sum (NaN when nothing was used).
func redisCPUPerJob(before, after []float64, jobs int) (micros float64, shares []float64) {
	deltas := make([]float64, len(after))
	var total float64
	for i := range after {
		deltas[i] = after[i] - before[i]
		total += deltas[i]
	}
	shares = make([]float64, len(deltas))
	for i, d := range deltas {
		shares[i] = d / total
	}
	if jobs <= 0 {
		return math.NaN(), shares
	}
	return total / float64(jobs) * 1e6, shares
}

// redisCPU prints a phase's Redis CPU per job, and with several primaries
// their shares in the order of the redis-primaries line and whether the
// largest meets the balance goal:
// "push-redis-cpu 46.2 us/job shares=35.1,33.2,31.7% max-share=35.1% target<=40 ok".
func (r *reporter) redisCPU(name string, microsPerJob float64, shares []float64) {
	if math.IsNaN(microsPerJob) {
		fmt.Fprintf(r.out, "%s n/a no jobs\n", name)
		return
	}
	line := name + " " + formatNumber(math.Round(microsPerJob*100)/100) + " us/job"
	if len(shares) > 1 {
		percents := make([]string, len(shares))
		largest := 0.0
		for i, s := range shares {
			percents[i] = formatPercent(s)
			largest = max(largest, s)
		}
		goal := atMost(100 * maxPrimaryShare)
		line += " shares=" + strings.Join(percents, ",") + "% max-share=" + formatPercent(largest) + "% " +
			goal.annotate(math.Round(largest*1000)/10)
	}
	fmt.Fprintln(r.out, line)
}

// formatPercent writes a share as a percentage with one decimal.
func formatPercent(share float64) string {
	if math.IsNaN(share) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", 100*share)
}

// printRedisCPU prints the CPU seconds of every primary of s.redisAddr,
// summed: the reading scripts/bench.sh takes around its redis-benchmark
// runs.
func printRedisCPU(out io.Writer, s settings) error {
	r, err := dialRedis(s.redisAddr, s.redisDB, s.redisPassword, s.keyPrefix)
	if err != nil {
		return err
	}
	defer r.close()
	seconds, err := r.cpuSeconds()
	if err != nil {
		return err
	}
	var total float64
	for _, v := range seconds {
		total += v
	}
	_, err = fmt.Fprintf(out, "%.6f\n", total)
	return err
}
