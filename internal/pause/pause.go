// Package pause waits for a while unless a context ends first: the
// backoffs and settling waits of the server's loops, its client and its
// tools.
package pause

import (
	"context"
	"time"
)

// For waits for d, or until ctx is done, and then returns ctx's error.
func For(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
