// Package logwriter writes the server's log lines to its output (stderr)
// from one goroutine, with the lines that arrive meanwhile gathered into
// one write.
//
// Under load the server logs a line per request. slog's handlers hold a
// lock around each Write, so with a plain file every request waited there
// for the write system calls of the requests before it, one call per line.
// Here a Write only copies its line; the writer goroutine writes all the
// lines queued since its last write in one call. Alone, a line is written
// at once, with no timer. A line is in memory only while the write before
// it runs, so a kill -9 loses at most those; Close writes what is queued
// before the process exits.
package logwriter

import (
	"io"
	"sync"
)

// maxQueued bounds the bytes queued: a Write waits while this much is
// queued and the output is slow (a full pipe), as it would wait for a
// plain file, rather than let the queue grow without bound.
const maxQueued = 1 << 20

// Writer is an io.Writer that queues what it is given for its goroutine to
// write to out. Until Close, Write never fails: an error from out is
// returned by Close.
type Writer struct {
	out io.Writer

	mu sync.Mutex
	// changed is signaled when lines enter an empty queue, when a write
	// ends, when the goroutine stops, and at Close.
	changed *sync.Cond
	queued  []byte
	spare   []byte // the buffer of the last write, reused for the next queue
	closed  bool   // Close was called: the goroutine stops once queued is written
	stopped bool   // the goroutine has stopped: Write writes to out itself
	err     error  // out's first error
	done    chan struct{}
}

// New starts a Writer on out. Close it to write what is queued and stop
// its goroutine.
func New(out io.Writer) *Writer {
	w := &Writer{out: out, done: make(chan struct{})}
	w.changed = sync.NewCond(&w.mu)
	go w.run()
	return w
}

// Write queues a copy of p. Once Close has written the queue, it writes p
// itself.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.queued) >= maxQueued && !w.stopped {
		w.changed.Wait()
	}
	if w.stopped {
		return w.out.Write(p)
	}
	wake := len(w.queued) == 0
	w.queued = append(w.queued, p...)
	if wake {
		w.changed.Broadcast()
	}
	return len(p), nil
}

func (w *Writer) run() {
	defer close(w.done)
	w.mu.Lock()
	defer w.mu.Unlock()
	for {
		for len(w.queued) == 0 && !w.closed {
			w.changed.Wait()
		}
		if len(w.queued) == 0 {
			w.stopped = true
			w.changed.Broadcast()
			return
		}
		batch := w.queued
		w.queued = w.spare[:0]
		w.mu.Unlock()
		_, err := w.out.Write(batch)
		w.mu.Lock()
		if err != nil && w.err == nil {
			w.err = err
		}
		w.spare = batch[:0]
		w.changed.Broadcast()
	}
}

// Close writes what is queued, stops the goroutine, and returns the first
// error out gave. Later writes go straight to out.
func (w *Writer) Close() error {
	w.mu.Lock()
	w.closed = true
	w.changed.Broadcast()
	w.mu.Unlock()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
