package logwriter

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkRequestLines logs one request line per op from parallel
// goroutines, as the server does under load, to a file: written by the
// handler itself (direct) or through a Writer (gathered).
func BenchmarkRequestLines(b *testing.B) {
	for _, tc := range []struct {
		name string
		wrap func(io.Writer) (io.Writer, func() error)
	}{
		{"direct", func(w io.Writer) (io.Writer, func() error) { return w, func() error { return nil } }},
		{"gathered", func(w io.Writer) (io.Writer, func() error) { lw := New(w); return lw, lw.Close }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "log"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			out, closeOut := tc.wrap(f)
			logger := slog.New(slog.NewTextHandler(out, nil))
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					logger.LogAttrs(context.Background(), slog.LevelInfo, "http request", slog.String("method", "POST"),
						slog.String("path", "/push"), slog.Int("status", 200), slog.Int("code", 0),
						slog.String("topic", "bench-rd"), slog.String("job_id", "w0000000001234"))
				}
			})
			if err := closeOut(); err != nil {
				b.Fatal(err)
			}
		})
	}
}
