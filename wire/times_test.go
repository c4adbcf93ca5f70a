package wire

import (
	"testing"
	"time"
)

func TestUnixTimes(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		name            string
		t               time.Time
		seconds, millis int64
	}{
		{"unknown", time.Time{}, 0, 0},
		{"known", at, 1_700_000_000, 1_700_000_000_123},
	} {
		if s, ms := UnixPair(tc.t); s != tc.seconds || ms != tc.millis {
			t.Errorf("%s: UnixPair = %d, %d, want %d, %d", tc.name, s, ms, tc.seconds, tc.millis)
		}
		if s, ms := UnixSeconds(tc.t), UnixMillis(tc.t); s != tc.seconds || ms != tc.millis {
			t.Errorf("%s: UnixSeconds, UnixMillis = %d, %d, want %d, %d", tc.name, s, ms, tc.seconds, tc.millis)
		}
		s, ms := OptionalUnixPair(tc.t)
		if tc.t.IsZero() != (s == nil) || tc.t.IsZero() != (ms == nil) {
			t.Errorf("%s: OptionalUnixPair = %v, %v", tc.name, s, ms)
		} else if s != nil && (*s != tc.seconds || *ms != tc.millis) {
			t.Errorf("%s: OptionalUnixPair = %d, %d, want %d, %d", tc.name, *s, *ms, tc.seconds, tc.millis)
		}
		if got := TimeOf(tc.seconds, tc.millis); !got.Equal(tc.t) {
			t.Errorf("%s: TimeOf = %v, want %v", tc.name, got, tc.t)
		}
		if got := TimeOfOptional(s, ms); !got.Equal(tc.t) {
			t.Errorf("%s: TimeOfOptional = %v, want %v", tc.name, got, tc.t)
		}
	}
	// A server older than the _ms fields gives only the seconds.
	if got := TimeOf(1_700_000_000, 0); !got.Equal(time.Unix(1_700_000_000, 0)) {
		t.Errorf("TimeOf(seconds only) = %v", got)
	}
	if got := TimeOfOptional(new(int64(1_700_000_000)), nil); !got.Equal(time.Unix(1_700_000_000, 0)) {
		t.Errorf("TimeOfOptional(seconds only) = %v", got)
	}
}
