package logwriter

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder is an output that keeps each Write's bytes, and, made by
// holding, holds its writes until released.
type recorder struct {
	mu      sync.Mutex
	writes  [][]byte
	entered chan struct{} // a held write has started (buffered: one signal)
	hold    chan struct{} // held writes wait for it to close
	err     error
}

func holding() *recorder {
	return &recorder{entered: make(chan struct{}, 1), hold: make(chan struct{})}
}

func (r *recorder) release() { close(r.hold) }

func (r *recorder) Write(p []byte) (int, error) {
	if r.hold != nil {
		select {
		case r.entered <- struct{}{}:
		default:
		}
		<-r.hold
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writes = append(r.writes, append([]byte(nil), p...))
	return len(p), r.err
}

func (r *recorder) all() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(bytes.Join(r.writes, nil))
}

func TestEveryLineArrivesWholeAndInOrderPerWriter(t *testing.T) {
	for _, tc := range []struct {
		name             string
		writers, perEach int
		lineSize         int
	}{
		{"one writer", 1, 1000, 40},
		{"many writers", 16, 500, 120},
		{"lines larger than the bound", 2, 3, maxQueued + 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &recorder{}
			w := New(out)
			var wg sync.WaitGroup
			for g := range tc.writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tc.perEach {
						head := fmt.Sprintf("%d %d ", g, i)
						line := head + strings.Repeat("x", tc.lineSize-len(head)-1) + "\n"
						if n, err := w.Write([]byte(line)); n != len(line) || err != nil {
							t.Errorf("Write = %d, %v", n, err)
						}
					}
				}()
			}
			wg.Wait()
			if err := w.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			lines := strings.Split(strings.TrimSuffix(out.all(), "\n"), "\n")
			if len(lines) != tc.writers*tc.perEach {
				t.Fatalf("%d lines written, want %d", len(lines), tc.writers*tc.perEach)
			}
			next := make([]int, tc.writers)
			for _, line := range lines {
				var g, i int
				if _, err := fmt.Sscanf(line, "%d %d ", &g, &i); err != nil || len(line) != tc.lineSize-1 {
					t.Fatalf("line %.40q... (%d bytes) is not one whole line", line, len(line))
				}
				if i != next[g] {
					t.Fatalf("writer %d: line %d came where %d was due", g, i, next[g])
				}
				next[g]++
			}
		})
	}
}

func TestLinesQueuedDuringAWriteShareTheNext(t *testing.T) {
	out := holding()
	w := New(out)
	w.Write([]byte("first\n"))
	<-out.entered // the goroutine is inside the first write, held
	for i := range 100 {
		w.Write(fmt.Appendf(nil, "line %d\n", i))
	}
	out.release()
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if len(out.writes) != 2 {
		t.Fatalf("%d writes, want 2: the first line, then the 100 queued meanwhile", len(out.writes))
	}
	if got := strings.Count(string(out.writes[1]), "\n"); got != 100 {
		t.Fatalf("second write holds %d lines, want 100", got)
	}
}

func TestQueueIsBoundedWhileTheOutputIsSlow(t *testing.T) {
	out := holding()
	w := New(out)
	w.Write([]byte("first\n"))
	<-out.entered
	line := []byte(strings.Repeat("y", 999) + "\n")
	const lines = 3 * maxQueued / 1000
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range lines {
			w.Write(line)
		}
	}()
	// Hold the output until the queue is full: the writer must then wait.
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		full := len(w.queued) >= maxQueued
		w.mu.Unlock()
		if full {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the queue never filled while the output was held")
		}
		time.Sleep(time.Millisecond)
	}
	out.release()
	<-done
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	total := 0
	for i, b := range out.writes {
		total += len(b)
		if len(b) > maxQueued+len(line) {
			t.Fatalf("write %d carried %d bytes: more than the bound (%d) and a line", i, len(b), maxQueued)
		}
	}
	if want := len("first\n") + lines*len(line); total != want {
		t.Fatalf("%d bytes written, want %d", total, want)
	}
}

func TestCloseReturnsTheOutputsErrorAndLaterWritesGoStraightThrough(t *testing.T) {
	broken := errors.New("disk full")
	out := &recorder{err: broken}
	w := New(out)
	if n, err := w.Write([]byte("a\n")); n != 2 || err != nil {
		t.Fatalf("Write = %d, %v; want 2, nil (errors wait for Close)", n, err)
	}
	if err := w.Close(); !errors.Is(err, broken) {
		t.Fatalf("Close = %v, want %v", err, broken)
	}
	out.err = nil
	if n, err := w.Write([]byte("b\n")); n != 2 || err != nil {
		t.Fatalf("Write after Close = %d, %v", n, err)
	}
	if got := out.all(); got != "a\nb\n" {
		t.Fatalf("output %q, want %q", got, "a\nb\n")
	}
}
