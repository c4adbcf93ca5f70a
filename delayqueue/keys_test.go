package delayqueue

import (
	"hash/crc32"
	"math"
	"strings"
	"testing"

	"github.com/delay-queue/delay-queue/internal/redisconn"
)

// Buckets are chosen by CRC-32 of the id: the string version must agree
// with the library's for every id, or re-pushed jobs would change bucket.
func TestChecksumIEEEMatchesCRC32(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"", "a", "15702398321", "p0000000000042", "订单-1", "\x00\xff\x80", string(make([]byte, 1000))} {
		if got, want := checksumIEEE(id), crc32.ChecksumIEEE([]byte(id)); got != want {
			t.Errorf("checksumIEEE(%q) = %08x, want %08x", id, got, want)
		}
	}
}

// redisCliSplit is how redis-cli --cluster create shares the slots among
// primaries: contiguous ranges of 16384/primaries slots, rounded.
func redisCliSplit(primaries int) [][2]int {
	per := float64(redisconn.SlotCount) / float64(primaries)
	var ranges [][2]int
	first, cursor := 0, 0.0
	for i := 0; i < primaries; i++ {
		last := int(math.Round(cursor + per - 1))
		if last > redisconn.SlotCount-1 || i == primaries-1 {
			last = redisconn.SlotCount - 1
		}
		ranges = append(ranges, [2]int{first, last})
		first = last + 1
		cursor += per
	}
	return ranges
}

// The partitions' tags spread evenly over a cluster split by redis-cli:
// with as many partitions as primaries (3 on 3), or a multiple, every
// primary holds the same number, for the default names and others.
func TestPartitionTagsSpreadOverPrimaries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		bucketName            string
		partitions, primaries int
	}{
		{"dq_bucket_%d", 3, 3},
		{"dq_bucket_%d", 12, 3},
		{"dq_bucket_%d", 12, 4},
		{"dq_bucket_%d", 12, 6},
		{"dq_bucket_%d", 12, 12},
		{"dq_bucket_%d", 6, 2},
		{"orders_%d_bucket", 3, 3},
		{"x%d", 24, 8},
	} {
		k, err := newKeySchema(Options{BucketName: tc.bucketName, QueueName: "q%s", KeyPrefix: "dq_"})
		if err != nil {
			t.Fatal(err)
		}
		split := redisCliSplit(tc.primaries)
		per := make([]int, tc.primaries)
		tags := map[string]bool{}
		for n := 1; n <= tc.partitions; n++ {
			tag := k.partitionTag(n, tc.partitions)
			if tags[tag] {
				t.Fatalf("%+v: tag %s given twice", tc, tag)
			}
			tags[tag] = true
			if !strings.HasPrefix(tag, "{"+k.bucketName(n)) || !strings.HasSuffix(tag, "}") {
				t.Fatalf("%+v: tag %s of partition %d is not its bucket name's", tc, tag, n)
			}
			slot := redisconn.Slot(tag + "dq_jobs")
			for i, r := range split {
				if slot >= r[0] && slot <= r[1] {
					per[i]++
				}
			}
		}
		for i, n := range per {
			if n != tc.partitions/tc.primaries {
				t.Errorf("%+v: primary %d holds %d partitions (%v), want %d each", tc, i, n, per, tc.partitions/tc.primaries)
			}
		}
	}
}

// A topic or id holding braces cannot move a key to another slot: the
// partition's tag comes first in every key name.
func TestBracesInNamesKeepTheirPartitionsSlot(t *testing.T) {
	t.Parallel()
	k, err := newKeySchema(Options{BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s", KeyPrefix: "dq_"})
	if err != nil {
		t.Fatal(err)
	}
	tag := k.partitionTag(2, 3)
	want := redisconn.Slot(tag)
	for _, name := range []string{"{x}", "a{b}c", "}{", "{", "}", "{{}}"} {
		for _, key := range append(k.partitionKeys(tag), k.wake(tag, name), k.control(tag, name, 0)) {
			if got := redisconn.Slot(key); got != want {
				t.Errorf("key %q is in slot %d, want its partition's %d", key, got, want)
			}
		}
	}
}
