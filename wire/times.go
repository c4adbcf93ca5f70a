package wire

import "time"

// The API gives a time as unix seconds and, in the field ending in _ms,
// unix milliseconds. 0 is an unknown time (a job imported from the original
// server has no creation time), which these helpers map to and from the
// zero time.Time rather than to year 1; a field that is left out when
// unknown is a nil pointer instead.

// UnixSeconds is t in unix seconds, 0 for the zero time.
func UnixSeconds(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// UnixMillis is t in unix milliseconds, 0 for the zero time.
func UnixMillis(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// UnixPair is t in unix seconds and milliseconds, both 0 for the zero
// time.
func UnixPair(t time.Time) (seconds, millis int64) {
	return UnixSeconds(t), UnixMillis(t)
}

// OptionalUnixPair is UnixPair for the fields an answer leaves out when the
// time is unknown: both nil for the zero time.
func OptionalUnixPair(t time.Time) (seconds, millis *int64) {
	if t.IsZero() {
		return nil, nil
	}
	return new(t.Unix()), new(t.UnixMilli())
}

// TimeOf is the time given as unix seconds and milliseconds, preferring the
// milliseconds (the seconds alone come from a server older than them); the
// zero time when both are 0.
func TimeOf(seconds, millis int64) time.Time {
	switch {
	case millis != 0:
		return time.UnixMilli(millis)
	case seconds != 0:
		return time.Unix(seconds, 0)
	}
	return time.Time{}
}

// TimeOfOptional is TimeOf for fields that may be left out: a nil one
// counts as 0.
func TimeOfOptional(seconds, millis *int64) time.Time {
	var s, ms int64
	if seconds != nil {
		s = *seconds
	}
	if millis != nil {
		ms = *millis
	}
	return TimeOf(s, ms)
}
