package delayqueue

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/vmihailenco/msgpack/v5"
)

// originalJob is the job of the original ouqiang/delay-queue v0.4
// (delayqueue/job.go), with its Go field names and tags: the msgpack
// library keys its fields "1" to "5".
type originalJob struct {
	Topic string `json:"topic" msgpack:"1"`
	Id    string `json:"id" msgpack:"2"`
	Delay int64  `json:"delay" msgpack:"3"`
	TTR   int64  `json:"ttr" msgpack:"4"`
	Body  string `json:"body" msgpack:"5"`
}

// originalJobV03 is the same job as v0.2 and v0.3 declared it, without
// msgpack tags: the library keys its fields by their Go names.
type originalJobV03 struct {
	Topic string `json:"topic"`
	Id    string `json:"id"`
	Delay int64  `json:"delay"`
	TTR   int64  `json:"ttr"`
	Body  string `json:"body"`
}

// encodeOriginal encodes v with the msgpack library the original server
// used. Its version (vendored at d91c9f4) wrote integers compact; v5
// writes them as full int64 (0xd3) unless told otherwise, and the import
// reads both.
func encodeOriginal(t testing.TB, v any, compactInts bool) []byte {
	t.Helper()
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.UseCompactInts(compactInts)
	if err := enc.Encode(v); err != nil {
		t.Fatalf("encode %+v: %v", v, err)
	}
	return buf.Bytes()
}

// pack writes a value with the library's encoder primitives, for the
// shapes a struct does not give: repeated keys, non-string keys.
func pack(t testing.TB, write func(e *msgpack.Encoder) error) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := write(msgpack.NewEncoder(&buf)); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func marshal(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %v: %v", v, err)
	}
	return b
}

// nested wraps v in depth arrays.
func nested(v any, depth int) any {
	for range depth {
		v = []any{v}
	}
	return v
}

func TestDecodeLegacyJob(t *testing.T) {
	t.Parallel()
	v04 := originalJob{Topic: "order", Id: "a1", Delay: 1700000000, TTR: 120, Body: `{"uid":1}`}
	want04 := legacyJob{"order", "a1", 1700000000, 120, `{"uid":1}`}
	long := strings.Repeat("x", 70000) // a str32
	for _, tc := range []struct {
		name    string
		raw     []byte
		want    legacyJob
		wantErr bool
	}{
		// What the original wrote.
		{name: "v0.4, compact ints", raw: encodeOriginal(t, v04, true), want: want04},
		{name: "v0.4, int64", raw: encodeOriginal(t, v04, false), want: want04},
		{name: "v0.3, field names, compact ints", raw: encodeOriginal(t, originalJobV03(v04), true), want: want04},
		{name: "v0.3, field names, int64", raw: encodeOriginal(t, originalJobV03(v04), false), want: want04},
		{name: "v0.4, bodies of 300 and 70000 bytes",
			raw:  encodeOriginal(t, originalJob{Topic: strings.Repeat("t", 300), Id: "a3", Delay: 1, TTR: 1, Body: long}, true),
			want: legacyJob{strings.Repeat("t", 300), "a3", 1, 1, long}},
		{name: "v0.4, negative and wide ints",
			raw:  encodeOriginal(t, originalJob{Topic: "t", Delay: -100, TTR: math.MaxInt64}, true),
			want: legacyJob{Topic: "t", Delay: -100, TTR: math.MaxInt64}},
		{name: "v0.4, empty fields", raw: encodeOriginal(t, originalJob{}, true), want: legacyJob{}},

		// What else the import has always accepted.
		{name: "array in field order", raw: marshal(t, []any{"t", "i", 5, 6, "b"}), want: legacyJob{"t", "i", 5, 6, "b"}},
		{name: "short array", raw: marshal(t, []any{"t", "i"}), want: legacyJob{Topic: "t", ID: "i"}},
		{name: "long array", raw: marshal(t, []any{"t", "i", 5, 6, "b", map[string]any{"x": []any{1}}}),
			want: legacyJob{"t", "i", 5, 6, "b"}},
		{name: "field names in any case", raw: marshal(t, map[string]any{"TOPIC": "t", "iD": "i", "delay": 5, "Ttr": 6, "BODY": "b"}),
			want: legacyJob{"t", "i", 5, 6, "b"}},
		{name: "unknown fields are skipped",
			raw:  marshal(t, map[string]any{"1": "t", "Extra": map[string]any{"a": []any{1, true, nil, 1.5, "s"}}, "9": "x", "": false}),
			want: legacyJob{Topic: "t"}},
		{name: "missing fields are zero", raw: marshal(t, map[string]any{"1": "t"}), want: legacyJob{Topic: "t"}},
		{name: "empty map", raw: marshal(t, map[string]any{}), want: legacyJob{}},
		{name: "nulls are zero", raw: marshal(t, map[string]any{"1": nil, "2": "i", "3": nil, "5": nil}), want: legacyJob{ID: "i"}},
		{name: "floats are truncated", raw: marshal(t, map[string]any{"3": 1700000000.9, "4": float32(30.5)}),
			want: legacyJob{Delay: 1700000000, TTR: 30}},
		{name: "binary strings", raw: marshal(t, map[string]any{"1": []byte("t"), "5": []byte{0, 1, 2}}),
			want: legacyJob{Topic: "t", Body: "\x00\x01\x02"}},
		{name: "uint64 within int64",
			raw: pack(t, func(e *msgpack.Encoder) error {
				return firstErr(e.EncodeMapLen(1), e.EncodeString("3"), e.EncodeUint64(1<<40))
			}),
			want: legacyJob{Delay: 1 << 40}},
		{name: "a key given twice: the last value counts",
			raw: pack(t, func(e *msgpack.Encoder) error {
				return firstErr(e.EncodeMapLen(2), e.EncodeString("1"), e.EncodeInt(5), e.EncodeString("1"), e.EncodeString("ok"))
			}),
			want: legacyJob{Topic: "ok"}},
		{name: "nested 8 deep", raw: marshal(t, map[string]any{"1": "t", "x": nested(1, 7)}), want: legacyJob{Topic: "t"}},

		// Corrupt values, refused.
		{name: "not msgpack", raw: []byte("not msgpack"), wantErr: true},
		{name: "v0.1's JSON", raw: mustJSON(t, v04), wantErr: true},
		{name: "empty value", raw: []byte{}, wantErr: true},
		{name: "nil", raw: marshal(t, nil), wantErr: true},
		{name: "a string", raw: marshal(t, "order"), wantErr: true},
		{name: "an integer", raw: marshal(t, 5), wantErr: true},
		{name: "trailing byte", raw: append(encodeOriginal(t, v04, true), 0x01), wantErr: true},
		{name: "two values", raw: append(encodeOriginal(t, v04, true), encodeOriginal(t, v04, true)...), wantErr: true},
		{name: "topic not a string", raw: marshal(t, map[string]any{"1": 5}), wantErr: true},
		{name: "id a bool", raw: marshal(t, map[string]any{"Id": true}), wantErr: true},
		{name: "delay a string", raw: marshal(t, map[string]any{"3": "soon"}), wantErr: true},
		{name: "ttr a bool", raw: marshal(t, map[string]any{"4": true}), wantErr: true},
		{name: "body a map", raw: marshal(t, map[string]any{"5": map[string]any{"a": "b"}}), wantErr: true},
		{name: "body an array", raw: marshal(t, []any{"t", "i", 1, 1, []any{"b"}}), wantErr: true},
		{name: "delay beyond int64",
			raw: pack(t, func(e *msgpack.Encoder) error {
				return firstErr(e.EncodeMapLen(1), e.EncodeString("3"), e.EncodeUint64(math.MaxUint64))
			}), wantErr: true},
		{name: "a key given twice: the last value is not a string",
			raw: pack(t, func(e *msgpack.Encoder) error {
				return firstErr(e.EncodeMapLen(2), e.EncodeString("1"), e.EncodeString("ok"), e.EncodeString("1"), e.EncodeInt(5))
			}), wantErr: true},
		{name: "a key not a string",
			raw: pack(t, func(e *msgpack.Encoder) error {
				return firstErr(e.EncodeMapLen(1), e.EncodeInt(1), e.EncodeString("t"))
			}), wantErr: true},
		{name: "a nil key",
			raw: pack(t, func(e *msgpack.Encoder) error {
				return firstErr(e.EncodeMapLen(1), e.EncodeNil(), e.EncodeString("t"))
			}), wantErr: true},
		{name: "a key not a string in an unknown field", raw: marshal(t, map[string]any{"x": map[int]string{1: "a"}}), wantErr: true},
		{name: "nested 9 deep", raw: marshal(t, map[string]any{"1": "t", "x": nested(1, 8)}), wantErr: true},
		{name: "an extension value", raw: marshal(t, map[string]any{"1": "t", "at": time.Unix(1, 0)}), wantErr: true},
		{name: "the reserved type byte 0xc1", raw: []byte{0x81, 0xa1, 'x', 0xc1}, wantErr: true},
		{name: "a map longer than the value", raw: []byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, '1'}, wantErr: true},
		{name: "an array longer than the value", raw: []byte{0xdd, 0xff, 0xff, 0xff, 0xff, 0xa1, 't'}, wantErr: true},
		{name: "a string longer than the value", raw: []byte{0x81, 0xa1, '5', 0xdb, 0xff, 0xff, 0xff, 0xff, 'b'}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := decodeLegacyJob(tc.raw)
			if (err != nil) != tc.wantErr {
				t.Fatalf("decode % x: err = %v, wantErr %v (got %s)", truncate(tc.raw), err, tc.wantErr, describe(got))
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("got %s, want %s", describe(got), describe(tc.want))
			}
		})
	}
}

// A value cut short anywhere is refused, whichever form the original
// wrote it in.
func TestDecodeLegacyJobCutShort(t *testing.T) {
	t.Parallel()
	job := originalJob{Topic: "order", Id: "a1", Delay: 1700000000, TTR: 120, Body: strings.Repeat("b", 40)}
	for _, full := range [][]byte{
		encodeOriginal(t, job, true),
		encodeOriginal(t, job, false),
		encodeOriginal(t, originalJobV03(job), true),
	} {
		for n := range len(full) {
			if got, err := decodeLegacyJob(full[:n]); err == nil {
				t.Errorf("% x (%d of %d bytes) decoded as %s, want an error", truncate(full[:n]), n, len(full), describe(got))
			}
		}
	}
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// describe shows a job with its strings cut to 40 bytes.
func describe(j legacyJob) string {
	short := func(s string) string {
		if len(s) > 40 {
			return fmt.Sprintf("%q...(%d bytes)", s[:40], len(s))
		}
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("{Topic:%s ID:%s Delay:%d TTR:%d Body:%s}", short(j.Topic), short(j.ID), j.Delay, j.TTR, short(j.Body))
}

func truncate(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}

// The original server's data is imported at start-up. Not on a cluster:
// the original never ran on one, and Run does not look for its keys there.
func TestImportLegacy(t *testing.T) {
	t.Parallel()
	forEachStandaloneBackend(t, func(t *testing.T, r *testRedis) {
		c := r.dialPrimary(t, r.opts.Addr)
		defer c.Close()
		now := time.Now().Unix()
		// What the original server leaves behind: raw-id keys of msgpack, bucket
		// members scored in seconds (in any of its buckets), ids in ready lists.
		fixture := []struct {
			id, topic, body string
			v03             bool // written by v0.2 or v0.3: keyed by field name
			compact         bool
			at              int64
			bucket          int // 0: in the ready list
		}{
			{id: "L-due", topic: "order", body: "past due", compact: true, bucket: 2, at: now - 5},
			{id: "L-soon", topic: "order", body: "in a second", compact: false, bucket: 1, at: now + 1},
			{id: "L-later", topic: "order", body: "in an hour", compact: false, bucket: 1, at: now + 3600},
			{id: "L-ready", topic: "order", body: "already ready", compact: true},
			{id: "L-v03-due", topic: "order", body: "v0.3, past due", v03: true, compact: true, bucket: 3, at: now - 1},
			{id: "L-v03-ready", topic: "order", body: "v0.3, ready", v03: true, compact: false},
		}
		for _, f := range fixture {
			job := originalJob{Topic: f.topic, Id: f.id, Delay: max(f.at, now), TTR: 30, Body: f.body}
			var raw []byte
			if f.v03 {
				raw = encodeOriginal(t, originalJobV03(job), f.compact)
			} else {
				raw = encodeOriginal(t, job, f.compact)
			}
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
		// Ids with no job behind them (the original's finish and delete left
		// those in buckets and ready lists), values that do not decode as
		// its jobs, and jobs it took that this server's limits refuse: none
		// stops the import, and each is left as it is, for the operator.
		if _, err := c.Do("ZADD", "dq_bucket_3", now, "finished-long-ago"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Do("RPUSH", "dq_queue_order", "deleted-long-ago"); err != nil {
			t.Fatal(err)
		}
		corrupt := []struct {
			id    string
			raw   []byte
			ready bool
		}{
			{id: "L-corrupt", raw: []byte("not msgpack")},
			{id: "L-cut", raw: encodeOriginal(t, originalJob{Topic: "order", Id: "L-cut", Body: "cut"}, true)[:12]},
			{id: "L-json", raw: mustJSON(t, originalJob{Topic: "order", Id: "L-json", Body: "v0.1"}), ready: true},
			{id: "L-bad-topic", raw: marshal(t, map[string]any{"1": 7, "2": "L-bad-topic", "5": "x"})},
			{id: "L-bad-ttr", raw: marshal(t, map[string]any{"1": "order", "4": "soon"}), ready: true},
			{id: "L-deep", raw: marshal(t, map[string]any{"1": "order", "x": nested(1, 8)})},
			{id: "L-long-topic", raw: encodeOriginal(t, originalJob{Topic: strings.Repeat("t", MaxTopicBytes+1), Id: "L-long-topic", TTR: 30}, true)},
			{id: "L-control-topic", raw: encodeOriginal(t, originalJob{Topic: "n\x00m", Id: "L-control-topic", TTR: 30}, true)},
			{id: strings.Repeat("i", MaxIDBytes+1), raw: encodeOriginal(t, originalJob{Topic: "order", Id: strings.Repeat("i", MaxIDBytes+1), TTR: 30}, true)},
		}
		for _, f := range corrupt {
			if _, err := c.Do("SET", f.id, f.raw); err != nil {
				t.Fatal(err)
			}
			var err error
			if f.ready {
				_, err = c.Do("RPUSH", "dq_queue_order", f.id)
			} else {
				_, err = c.Do("ZADD", "dq_bucket_3", now, f.id)
			}
			if err != nil {
				t.Fatal(err)
			}
		}

		// Run imports them before it serves. An id with no job is no
		// outage: Redis answered.
		obs := &recordingObserver{counts: map[string]int{}}
		q := newTestQueue(t, r, func(o *Options) { o.Observer = obs })
		// A second import finds only the jobs the first left as they were.
		if n, err := q.importV0(context.Background()); err != nil || n != (importTally{left: len(corrupt)}) {
			t.Fatalf("second import = %+v, %v; want none imported, %d left", n, err, len(corrupt))
		}
		if n := obs.get("redis-error/"); n != 0 {
			t.Errorf("the import counted %d redis errors, want none", n)
		}
		info, err := q.Get(context.Background(), "L-later")
		if err != nil || info == nil || info.State != StateDelay || info.Body != "in an hour" || info.DueAt.Unix() != now+3600 || info.TTR != 30*time.Second {
			t.Fatalf("get L-later = %+v, %v", info, err)
		}
		if exists, _ := redis.Bool(c.Do("EXISTS", "L-later")); exists {
			t.Fatal("raw key L-later left behind")
		}
		for _, f := range corrupt {
			if raw, err := redis.Bytes(c.Do("GET", f.id)); err != nil || !bytes.Equal(raw, f.raw) {
				t.Errorf("%s: raw value now % x, %v; want it left as it was", f.id, truncate(raw), err)
			}
			var kept bool
			if f.ready {
				_, err = redis.Int(c.Do("LPOS", "dq_queue_order", f.id))
				kept = err == nil
			} else {
				_, err = redis.Float64(c.Do("ZSCORE", "dq_bucket_3", f.id))
				kept = err == nil
			}
			if !kept {
				t.Errorf("%s: no longer in the original's list or bucket (%v)", f.id, err)
			}
			if info, err := q.Get(context.Background(), f.id); err != nil || info != nil {
				t.Errorf("%s: imported as %+v, %v", f.id, info, err)
			}
		}

		want := map[string]string{}
		for _, f := range fixture {
			if f.at <= now+1 {
				want[f.id] = f.body
			}
		}
		got := map[string]string{}
		deadline := time.Now().Add(10 * time.Second)
		for len(got) < len(want) && time.Now().Before(deadline) {
			d, err := q.Pop(context.Background(), []string{"order"}, 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if d != nil {
				got[d.ID] = d.Body
				if d.ID == "L-soon" && time.Now().Unix() < now+1 {
					t.Fatalf("L-soon delivered early")
				}
				q.Finish(context.Background(), d.ID)
			}
		}
		if !maps.Equal(got, want) {
			t.Fatalf("delivered %v, want %v", got, want)
		}
	})
}

// Whatever the bytes, the decoder returns; what it accepts, written back
// as the original writes a job, reads the same.
func FuzzDecodeLegacyJob(f *testing.F) {
	job := originalJob{Topic: "order", Id: "a1", Delay: 1700000000, TTR: 120, Body: `{"uid":1}`}
	f.Add(encodeOriginal(f, job, true))
	f.Add(encodeOriginal(f, job, false))
	f.Add(encodeOriginal(f, originalJobV03(job), true))
	f.Add(marshal(f, []any{"t", "i", 5, 6.5, []byte("b"), nil}))
	f.Add(marshal(f, map[string]any{"x": nested(map[string]any{"1": 1}, 7)}))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := decodeLegacyJob(raw)
		if err != nil {
			return
		}
		again, err := decodeLegacyJob(encodeOriginal(t, originalJob{got.Topic, got.ID, got.Delay, got.TTR, got.Body}, true))
		if err != nil || again != got {
			t.Fatalf("% x decoded as %s, but its re-encoding as %s, %v", truncate(raw), describe(got), describe(again), err)
		}
	})
}
