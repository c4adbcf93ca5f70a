package main

import (
	"bytes"
	"math"
	"testing"
)

func TestRedisCPUPerJob(t *testing.T) {
	tests := []struct {
		name          string
		before, after []float64
		jobs          int
		wantMicros    float64
		wantShares    []float64
	}{
		{"one primary", []float64{10}, []float64{10.5}, 10000, 50, []float64{1}},
		{"three primaries", []float64{1, 2, 3}, []float64{1.2, 2.3, 3.5}, 1000, 1000, []float64{0.2, 0.3, 0.5}},
		{"no jobs", []float64{1}, []float64{2}, 0, math.NaN(), []float64{1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			micros, shares := redisCPUPerJob(tt.before, tt.after, tt.jobs)
			if !nearly(micros, tt.wantMicros) {
				t.Errorf("µs per job = %v, want %v", micros, tt.wantMicros)
			}
			if len(shares) != len(tt.wantShares) {
				t.Fatalf("shares = %v, want %v", shares, tt.wantShares)
			}
			for i := range shares {
				if !nearly(shares[i], tt.wantShares[i]) {
					t.Errorf("shares = %v, want %v", shares, tt.wantShares)
				}
			}
		})
	}
}

// nearly compares floats to 1e-9, NaN equal to NaN.
func nearly(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	return math.Abs(a-b) < 1e-9
}

func TestReporterRedisCPU(t *testing.T) {
	tests := []struct {
		name   string
		micros float64
		shares []float64
		want   string
	}{
		{"standalone: no shares", 46.234, []float64{1}, "push-redis-cpu 46.23 us/job\n"},
		{"balanced cluster", 48.1, []float64{0.351, 0.332, 0.317},
			"push-redis-cpu 48.1 us/job shares=35.1,33.2,31.7% max-share=35.1% target<=40 ok\n"},
		{"one primary over 40%", 130, []float64{0.5, 0.25, 0.25},
			"push-redis-cpu 130 us/job shares=50.0,25.0,25.0% max-share=50.0% target<=40 MISS\n"},
		{"no jobs", math.NaN(), []float64{1}, "push-redis-cpu n/a no jobs\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			(&reporter{out: &out}).redisCPU("push-redis-cpu", tt.micros, tt.shares)
			if out.String() != tt.want {
				t.Errorf("printed %q, want %q", out.String(), tt.want)
			}
		})
	}
}

func TestConnectionBudget(t *testing.T) {
	tests := []struct {
		name                             string
		primaries, maxActive, partitions int
		want                             int
	}{
		// 4 loops in all: 2 per partition of 3 (ceil(4/3)), 1 per partition of 12.
		{"standalone, 3 partitions", 1, 48, 3, 48 + 3*2},
		{"one partition", 1, 48, 1, 48 + 4},
		{"four partitions", 1, 10, 4, 10 + 4},
		{"cluster of 3, 12 partitions", 3, 48, 12, 3*48 + 12},
		{"cluster of 6, 5 partitions", 6, 20, 5, 6*20 + 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := connectionBudget(tt.primaries, tt.maxActive, tt.partitions); got != tt.want {
				t.Errorf("connectionBudget(%d, %d, %d) = %d, want %d", tt.primaries, tt.maxActive, tt.partitions, got, tt.want)
			}
		})
	}
}
