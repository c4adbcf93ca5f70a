package pause

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestFor(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       time.Duration
		cancel  bool
		wantErr error
	}{
		{"waits the duration", 10 * time.Millisecond, false, nil},
		{"ends with its context", time.Hour, true, context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				cancel()
			}
			start := time.Now()
			err := For(ctx, tc.d)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("For = %v, want %v", err, tc.wantErr)
			}
			if !tc.cancel && time.Since(start) < tc.d {
				t.Errorf("For returned after %v, before %v", time.Since(start), tc.d)
			}
		})
	}
}
