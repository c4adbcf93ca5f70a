package delayqueue

import (
	"hash/crc32"
	"testing"
)

// Buckets are chosen by CRC-32 of the id: the string version must agree
// with the library's for every id, or re-pushed jobs would change bucket.
func TestChecksumIEEEMatchesCRC32(t *testing.T) {
	for _, id := range []string{"", "a", "15702398321", "p0000000000042", "订单-1", "\x00\xff\x80", string(make([]byte, 1000))} {
		if got, want := checksumIEEE(id), crc32.ChecksumIEEE([]byte(id)); got != want {
			t.Errorf("checksumIEEE(%q) = %08x, want %08x", id, got, want)
		}
	}
}
