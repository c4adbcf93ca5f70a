package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// target is the project's goal for a figure: at most or at least limit.
type target struct {
	atMost bool
	limit  float64
}

func atLeast(limit float64) *target { return &target{limit: limit} }
func atMost(limit float64) *target  { return &target{atMost: true, limit: limit} }

func (t target) met(v float64) bool {
	if t.atMost {
		return v <= t.limit
	}
	return v >= t.limit
}

// annotate says the goal and whether v meets it: "target>=0.27 ok".
func (t target) annotate(v float64) string {
	op := ">="
	if t.atMost {
		op = "<="
	}
	verdict := "MISS"
	if t.met(v) {
		verdict = "ok"
	}
	return "target" + op + formatNumber(t.limit) + " " + verdict
}

// reporter prints figures on stdout as "name value unit [notes]", one per
// line, and throughputs also as a ratio to redis-benchmark's SET req/s
// measured in the same run.
type reporter struct {
	out    io.Writer
	setRPS float64 // 0: no ratio (the rate was not given)
}

// throughput prints a jobs/s figure, its ratio to SET req/s and, when the
// rate is known, whether the ratio meets goal.
func (r *reporter) throughput(name string, jobsPerSecond float64, goal *target) {
	r.rate(name, jobsPerSecond, "jobs/s", goal)
}

// rate prints a per-second figure in unit, as throughput does.
func (r *reporter) rate(name string, perSecond float64, unit string, goal *target) {
	line := fmt.Sprintf("%s %.0f %s", name, perSecond, unit)
	if r.setRPS > 0 {
		ratio := perSecond / r.setRPS
		line += " ratio=" + strconv.FormatFloat(ratio, 'f', 3, 64)
		if goal != nil {
			line += " " + goal.annotate(ratio)
		}
	} else {
		line += " ratio=n/a"
	}
	fmt.Fprintln(r.out, line)
}

// value prints a figure with its unit and, when goal is not nil, whether it
// meets it.
func (r *reporter) value(name string, v float64, unit string, goal *target) {
	line := name + " " + formatNumber(v) + " " + unit
	if goal != nil {
		line += " " + goal.annotate(v)
	}
	fmt.Fprintln(r.out, line)
}

// unsupported prints a figure the server cannot be measured for yet.
func (r *reporter) unsupported(name string) {
	fmt.Fprintf(r.out, "%s n/a unsupported\n", name)
}

// failed prints a figure whose phase broke; the cause goes to stderr.
func (r *reporter) failed(name string) {
	fmt.Fprintf(r.out, "%s n/a failed\n", name)
}

// formatNumber prints integers without decimals and other values with one
// or two, enough for ms and ratios.
func formatNumber(v float64) string {
	switch {
	case v == math.Trunc(v) && math.Abs(v) < 1e15:
		return strconv.FormatInt(int64(v), 10)
	case math.Abs(v) >= 100:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strings.TrimRight(strings.TrimRight(strconv.FormatFloat(v, 'f', 2, 64), "0"), ".")
	}
}

// millis converts a duration to fractional milliseconds.
func millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// latencySummary holds the order statistics of a set of durations.
type latencySummary struct {
	n                  int
	min, p50, p99, max time.Duration
}

// summarize sorts samples (in place) and takes nearest-rank percentiles.
func summarize(samples []time.Duration) latencySummary {
	if len(samples) == 0 {
		return latencySummary{}
	}
	slices.Sort(samples)
	return latencySummary{
		n:   len(samples),
		min: samples[0],
		p50: percentile(samples, 50),
		p99: percentile(samples, 99),
		max: samples[len(samples)-1],
	}
}

// percentile is the nearest-rank p-th percentile of sorted samples: the
// smallest sample with at least p% of the samples at or below it.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(rank, 1)
	rank = min(rank, len(sorted))
	return sorted[rank-1]
}
