package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Progress bar layout.
const (
	barWidth       = 30
	redrawInterval = 100 * time.Millisecond
)

// progress draws a one-line progress bar on a terminal. A nil *progress
// draws nothing, so callers need not check whether there is a terminal.
type progress struct {
	w        io.Writer
	total    int // -1 when unknown
	done     int
	started  time.Time
	lastDraw time.Time
	now      func() time.Time
}

func newProgress(w io.Writer, total int, now func() time.Time) *progress {
	return &progress{w: w, total: total, started: now(), now: now}
}

// add counts n more lines done, redrawing at most every redrawInterval.
func (p *progress) add(n int) {
	if p == nil {
		return
	}
	p.done += n
	if now := p.now(); now.Sub(p.lastDraw) >= redrawInterval {
		p.lastDraw = now
		p.draw(now)
	}
}

// finish draws the final state and ends the line.
func (p *progress) finish() {
	if p == nil {
		return
	}
	p.draw(p.now())
	fmt.Fprintln(p.w)
}

func (p *progress) draw(now time.Time) {
	// \r returns to the line's start; \x1b[K clears what a longer previous
	// line left.
	fmt.Fprintf(p.w, "\r%s\x1b[K", renderProgress(p.done, p.total, now.Sub(p.started)))
}

// renderProgress formats done/total, the rate and the time left. total is
// -1 when unknown: no bar and no ETA then.
func renderProgress(done, total int, elapsed time.Duration) string {
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	if total < 0 {
		return fmt.Sprintf("%d jobs  %.0f jobs/s  %s", done, rate, elapsed.Round(time.Second))
	}
	fraction := 1.0
	if total > 0 {
		fraction = min(float64(done)/float64(total), 1)
	}
	filled := int(fraction * barWidth)
	bar := strings.Repeat("#", filled) + strings.Repeat("-", barWidth-filled)
	eta := "--"
	switch {
	case done >= total:
		eta = "0s"
	case rate > 0:
		eta = (time.Duration(float64(total-done) / rate * float64(time.Second))).Round(time.Second).String()
	}
	return fmt.Sprintf("[%s] %d/%d %3.0f%%  %.0f jobs/s  ETA %s", bar, done, total, fraction*100, rate, eta)
}
