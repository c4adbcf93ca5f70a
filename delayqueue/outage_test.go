package delayqueue

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// An outage is logged once when a call first fails and once when no slot
// is left down, however the calls of the slots interleave: on a cluster
// the other primaries' answers do not end the outage of one that is down.
func TestOutagesLogOnceEach(t *testing.T) {
	const a, b = "{dq_bucket_1}dq_jobs", "{dq_bucket_2}dq_jobs"
	type step struct {
		after  time.Duration // the clock moves on first
		key    string
		failed bool
		moving bool // the failure is a redirect not followed in time
		// begun is how long before the step the failed call began (0:
		// unknown, as for a loop's own connection).
		begun time.Duration
		down  bool // outages.any() after the step
	}
	tests := []struct {
		name     string
		oneRedis bool // else a cluster, whose slots are followed one by one
		steps    []step
		// logged is the lines, in order: "down" for the error, "up" for
		// the recovery.
		logged []string
	}{
		{
			name: "a cluster: every slot fails, then answers",
			steps: []step{
				{key: a, failed: true, down: true},
				{key: b, failed: true, down: true},
				{key: a, failed: true, down: true},
				{after: time.Second, key: a, down: true},
				{key: b, down: false},
				{key: a, down: false},
			},
			logged: []string{"down", "up"},
		},
		{
			name: "one redis: any answer ends the outage", oneRedis: true,
			steps: []step{
				{key: a, failed: true, down: true},
				{key: b, failed: true, down: true},
				{after: time.Second, key: b, down: false},
				{key: a, down: false},
			},
			logged: []string{"down", "up"},
		},
		{
			name: "a cluster primary down while another answers",
			steps: []step{
				{key: a, failed: true, down: true},
				{key: b, down: true},
				{after: time.Second, key: a, failed: true, down: true},
				{key: b, down: true},
				{after: 8 * time.Second, key: a, failed: true, down: true},
				{after: 8 * time.Second, key: b, down: true},
				{key: a, down: false},
				{key: b, down: false},
			},
			logged: []string{"down", "up"},
		},
		{
			name: "two outages",
			steps: []step{
				{key: a, failed: true, down: true},
				{key: a, down: false},
				{key: b, failed: true, down: true},
				{key: b, down: false},
			},
			logged: []string{"down", "up", "down", "up"},
		},
		{
			name: "a call begun before the recovery, failing after it, starts no outage",
			steps: []step{
				{key: a, failed: true, down: true},
				{after: time.Second, key: a, down: false},                               // the replica took over
				{after: 5 * time.Second, key: a, failed: true, begun: 10 * time.Second}, // left on the old primary
				{after: time.Second, key: a, failed: true, begun: time.Second / 2, down: true},
				{key: a, down: false},
			},
			logged: []string{"down", "up", "down", "up"},
		},
		{
			name: "a slot moving is not called unreachable",
			steps: []step{
				{key: a, failed: true, moving: true, down: true},
				{key: a, failed: true, down: true},
				{key: a, down: false},
			},
			logged: []string{"moving", "up"},
		},
		{
			name: "a slot no longer called is up once no call failed on it for a while",
			steps: []step{
				{key: a, failed: true, down: true},
				{after: outageStaleAfter, key: b, down: true},
				{after: time.Millisecond, key: b, down: false},
			},
			logged: []string{"down", "up"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			o := newOutages(slog.New(slog.NewTextHandler(&out, nil)), !tt.oneRedis)
			now := time.Unix(1_800_000_000, 0)
			o.now = func() time.Time { return now }
			for i, s := range tt.steps {
				now = now.Add(s.after)
				var started time.Time
				if s.begun > 0 {
					started = now.Add(-s.begun)
				}
				switch {
				case s.moving:
					o.failed(s.key, fmt.Errorf("%w: %w", ErrUnavailable, redis.Error("ASK 827 127.0.0.1:7001")), started)
				case s.failed:
					o.failed(s.key, fmt.Errorf("dial: %w", errors.New("connection refused")), started)
				default:
					o.answered(s.key)
				}
				if o.any() != s.down {
					t.Fatalf("step %d (%+v): any() = %v", i, s, o.any())
				}
			}
			var logged []string
			for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
				switch {
				case strings.Contains(line, `level=ERROR msg="redis is unreachable" err="dial: connection refused"`):
					logged = append(logged, "down")
				case strings.Contains(line, `level=WARN msg="redis cluster slot is moving between primaries; calls to it fail until the move settles" err="redis unavailable: ASK 827 127.0.0.1:7001"`):
					logged = append(logged, "moving")
				case strings.Contains(line, `level=INFO msg="redis is reachable again"`):
					logged = append(logged, "up")
				default:
					t.Errorf("unexpected line %q", line)
				}
			}
			if strings.Join(logged, ",") != strings.Join(tt.logged, ",") {
				t.Fatalf("logged %v, want %v\n%s", logged, tt.logged, out.String())
			}
		})
	}
}
