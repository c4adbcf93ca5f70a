package delayqueue

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// legacyMsgpack encodes a job the way the original server's msgpack library
// encoded its Job struct: a map keyed by the Go field names, with integers
// either compact or as int64 (0xd3), depending on the library version.
func legacyMsgpack(topic, id string, delay, ttr int64, body string, compactInts bool) []byte {
	b := []byte{0x85}
	str := func(s string) {
		switch {
		case len(s) < 32:
			b = append(b, 0xa0|byte(len(s)))
		case len(s) < 256:
			b = append(b, 0xd9, byte(len(s)))
		default:
			b = append(b, 0xda, byte(len(s)>>8), byte(len(s)))
		}
		b = append(b, s...)
	}
	integer := func(v int64) {
		switch {
		case compactInts && v >= 0 && v < 128:
			b = append(b, byte(v))
		case compactInts && v >= 0 && v < 1<<32:
			b = append(b, 0xce)
			b = binary.BigEndian.AppendUint32(b, uint32(v))
		default:
			b = append(b, 0xd3)
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
	}
	str("Topic")
	str(topic)
	str("Id")
	str(id)
	str("Delay")
	integer(delay)
	str("TTR")
	integer(ttr)
	str("Body")
	str(body)
	return b
}

func TestDecodeLegacyJob(t *testing.T) {
	for _, tc := range []struct {
		name    string
		raw     []byte
		want    legacyJob
		wantErr bool
	}{
		{"compact ints", legacyMsgpack("order", "a1", 1700000000, 120, "{\"uid\":1}", true),
			legacyJob{"order", "a1", 1700000000, 120, "{\"uid\":1}"}, false},
		{"int64", legacyMsgpack("order", "a2", 1700000001, 5, "", false),
			legacyJob{"order", "a2", 1700000001, 5, ""}, false},
		{"long body", legacyMsgpack("t", "a3", 1, 1, string(make([]byte, 300)), true),
			legacyJob{"t", "a3", 1, 1, string(make([]byte, 300))}, false},
		{"array form", []byte{0x95, 0xa1, 't', 0xa1, 'i', 0x05, 0x06, 0xa1, 'b'},
			legacyJob{"t", "i", 5, 6, "b"}, false},
		{"cut short", legacyMsgpack("order", "a1", 1, 1, "body", true)[:10], legacyJob{}, true},
		{"not msgpack map", []byte("hello"), legacyJob{}, true},
		{"trailing bytes", append(legacyMsgpack("t", "i", 1, 1, "", true), 0x01), legacyJob{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeLegacyJob(tc.raw)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// The original server's data is imported at start-up. Not on a cluster:
// the original never ran on one, and Run does not look for its keys there.
func TestImportLegacy(t *testing.T) {
	forEachStandaloneBackend(t, func(t *testing.T, r *testRedis) {
		c := r.dialPrimary(t, r.opts.Addr)
		defer c.Close()
		now := time.Now().Unix()
		// What the original server leaves behind: raw-id keys of msgpack, bucket
		// members scored in seconds (in any of its buckets), ids in ready lists.
		fixture := []struct {
			id, topic, body string
			compact         bool
			where           string // "bucket:<n>:<seconds from now>" or "ready"
			at              int64
			bucket          int
		}{
			{id: "L-due", topic: "order", body: "past due", compact: true, bucket: 2, at: now - 5},
			{id: "L-later", topic: "order", body: "in two seconds", compact: false, bucket: 1, at: now + 2},
			{id: "L-ready", topic: "order", body: "already ready", compact: true},
		}
		for _, f := range fixture {
			raw := legacyMsgpack(f.topic, f.id, max(f.at, now), 30, f.body, f.compact)
			if _, err := c.Do("SET", f.id, raw); err != nil {
				t.Fatal(err)
			}
			var err error
			if f.bucket > 0 {
				_, err = c.Do("ZADD", fmt.Sprintf("dq_bucket_%d", f.bucket), f.at, f.id)
			} else {
				_, err = c.Do("RPUSH", "dq_queue_"+f.topic, f.id)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		// A bucket member with no job behind it (the original's finish left
		// those) and a corrupt job: neither stops the import.
		c.Do("ZADD", "dq_bucket_3", now, "finished-long-ago")
		c.Do("SET", "L-corrupt", "not msgpack")
		c.Do("ZADD", "dq_bucket_3", now, "L-corrupt")

		// Run imports them before it serves.
		q := newTestQueue(t, r)
		if n, err := q.importV0(context.Background()); err != nil || n != 0 {
			t.Fatalf("second import = %d, %v; want 0", n, err)
		}
		info, err := q.Get(context.Background(), "L-later")
		if err != nil || info == nil || info.State != StateDelay || info.Body != "in two seconds" || info.DueAt.Unix() != now+2 || info.TTR != 30*time.Second {
			t.Fatalf("get L-later = %+v, %v", info, err)
		}
		if exists, _ := redis.Bool(c.Do("EXISTS", "L-later")); exists {
			t.Fatal("raw key L-later left behind")
		}

		got := map[string]string{}
		deadline := time.Now().Add(10 * time.Second)
		for len(got) < 3 && time.Now().Before(deadline) {
			d, err := q.Pop(context.Background(), []string{"order"}, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if d != nil {
				got[d.ID] = d.Body
				if d.ID == "L-later" && time.Now().Unix() < now+2 {
					t.Fatalf("L-later delivered early")
				}
				q.Finish(context.Background(), d.ID)
			}
		}
		for _, f := range fixture {
			if got[f.id] != f.body {
				t.Fatalf("%s: delivered body %q, want %q (all: %v)", f.id, got[f.id], f.body, got)
			}
		}
	})
}
