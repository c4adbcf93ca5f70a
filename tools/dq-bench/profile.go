package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clockTicksPerSecond is USER_HZ, the unit of /proc/<pid>/stat times; it
// is 100 on every Linux architecture Go supports.
const clockTicksPerSecond = 100

// phaseProfile is where the time of a phase went: the CPU each of the three
// processes used (the machine is small and shared, so a saturated core is
// the first suspect) and the Redis commands the server sent. It is logged,
// not printed as a figure.
type phaseProfile struct {
	start                        time.Time
	serverCPU, redisCPU, toolCPU float64
	connectionsReceived          int64
}

// startProfile resets Redis' command statistics and notes the CPU clocks.
// Failures only cost the profile, never the phase.
func (b *bench) startProfile() phaseProfile {
	p := phaseProfile{start: time.Now()}
	_ = b.redis.resetStats()
	if cpu, err := b.redis.cpuSeconds(); err == nil {
		p.redisCPU = sum(cpu)
	}
	p.serverCPU, _ = processCPUSeconds(b.s.serverPID)
	p.toolCPU = ownCPUSeconds()
	p.connectionsReceived, _ = b.redis.connectionsReceived()
	return p
}

// logProfile logs the phase's wall time, each process' CPU over it, and the
// Redis commands that took most of Redis' time, with calls per command.
func (b *bench) logProfile(phase string, p phaseProfile) {
	wall := time.Since(p.start).Seconds()
	attrs := []any{"phase", phase, "wall_s", round2(wall)}
	if cpu, err := processCPUSeconds(b.s.serverPID); err == nil && b.s.serverPID != 0 {
		attrs = append(attrs, "server_cpu_pct", round2(100*(cpu-p.serverCPU)/wall))
	}
	if cpu, err := b.redis.cpuSeconds(); err == nil {
		attrs = append(attrs, "redis_cpu_pct", round2(100*(sum(cpu)-p.redisCPU)/wall))
	}
	attrs = append(attrs, "tool_cpu_pct", round2(100*(ownCPUSeconds()-p.toolCPU)/wall))
	// New Redis connections during a phase mean a pool dialing instead of
	// reusing (the tool's own connection is opened once, before).
	if n, err := b.redis.connectionsReceived(); err == nil {
		attrs = append(attrs, "redis_conns_opened", n-p.connectionsReceived)
	}
	if stats, err := b.redis.commandStats(); err == nil {
		var top []string
		for _, s := range stats[:min(len(stats), 6)] {
			if s.calls == 0 {
				continue
			}
			top = append(top, fmt.Sprintf("%s=%d(%.1fus)", s.name, s.calls, float64(s.usec)/float64(s.calls)))
		}
		attrs = append(attrs, "redis_commands", strings.Join(top, " "))
	}
	b.logger.Info("phase profile", attrs...)
}

func round2(v float64) float64 { return float64(int64(v*100+0.5)) / 100 }

// processCPUSeconds reads utime+stime of a process from /proc/<pid>/stat.
func processCPUSeconds(pid int) (float64, error) {
	if pid == 0 {
		return 0, nil
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("read server CPU time: %w", err)
	}
	return parseProcStatCPU(string(raw))
}

// parseProcStatCPU takes utime and stime (fields 14 and 15) from a
// /proc/<pid>/stat line. The command name (field 2) may hold spaces, so
// fields are counted from its closing parenthesis.
func parseProcStatCPU(stat string) (float64, error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("malformed /proc stat line %q", stat)
	}
	fields := strings.Fields(stat[end+1:])
	// fields[0] is field 3 (state), so field n is fields[n-3].
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc stat line %q", stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc stat CPU time %q: %w", f, err)
		}
		ticks += n
	}
	return float64(ticks) / clockTicksPerSecond, nil
}

// ownCPUSeconds is the tool's own user+system CPU time.
func ownCPUSeconds() float64 {
	var usage syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &usage); err != nil {
		return 0
	}
	return time.Duration(usage.Utime.Nano() + usage.Stime.Nano()).Seconds()
}
