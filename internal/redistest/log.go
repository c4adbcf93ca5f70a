package redistest

import (
	"log/slog"
	"testing"
)

// Logger returns a logger that writes every record, debug ones included,
// to the test's output (t.Output): shown when the test fails or runs with
// -v, and with the test's name when tests run in parallel.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(LogHandler(t, slog.LevelDebug))
}

// LogHandler is the handler of Logger, writing records at level and
// above, for a test that wants fewer lines or wraps the handler (to count
// or record what is logged).
func LogHandler(t testing.TB, level slog.Leveler) slog.Handler {
	return slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level})
}
