package redistest

import (
	"testing"
	"time"
)

// WaitFor polls cond every 20 ms until it holds, and fails the test with
// what when it does not within limit. Tests wait on a condition rather
// than sleep for a while: a condition that never holds fails the test
// instead of letting it pass without testing what it meant to.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
