package delayqueue

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// legacySecondsLimit separates the original server's bucket scores (unix
// seconds, about 1.8e9) from ours (unix milliseconds, about 1.8e12).
const legacySecondsLimit = 100_000_000_000

// legacyJob is a job as the original ouqiang/delay-queue stored it: a
// msgpack encoding of its Go struct Job{Topic, Id, Delay, TTR, Body} under
// the raw id as key.
type legacyJob struct {
	Topic string
	ID    string
	Delay int64 // unix seconds
	TTR   int64 // seconds
	Body  string
}

// importV0 converts the jobs the original server left in this database
// into partitions: ids in its ready lists (queue_name) and in its bucket
// ZSETs (bucket_name, scores in seconds), each held in a raw-id key. Each
// job is converted atomically; it runs before the engine starts, never
// while the original server still runs on the same database.
func (q *Queue) importV0(ctx context.Context) (int, error) {
	imported := 0
	lists, err := q.scanKeys(ctx, globEscape(q.keys.readyPrefix)+"*"+globEscape(q.keys.readySuffix), "list")
	if err != nil {
		return 0, fmt.Errorf("import: list ready lists: %w", err)
	}
	for _, list := range lists {
		topic := strings.TrimSuffix(strings.TrimPrefix(list, q.keys.readyPrefix), q.keys.readySuffix)
		n, err := q.importReadyList(ctx, list, topic)
		imported += n
		if err != nil {
			return imported, err
		}
	}
	buckets, err := q.scanKeys(ctx, globEscape(q.keys.bucketPrefix)+"*"+globEscape(q.keys.bucketSuffix), "zset")
	if err != nil {
		return imported, fmt.Errorf("import: list buckets: %w", err)
	}
	for _, bucket := range buckets {
		n, err := q.importBucket(ctx, bucket)
		imported += n
		if err != nil {
			return imported, err
		}
	}
	return imported, nil
}

// scanKeys lists the keys matching pattern of a type, on a standalone
// Redis (the old layouts never ran on a cluster).
func (q *Queue) scanKeys(ctx context.Context, pattern, typ string) ([]string, error) {
	var keys []string
	err := q.withConn(ctx, q.partitions[0].key(), func(c redis.Conn) error {
		cursor := "0"
		for {
			args := []any{cursor, "MATCH", pattern, "COUNT", 1000}
			if typ != "" {
				args = append(args, "TYPE", typ)
			}
			reply, err := redis.Values(c.Do("SCAN", args...))
			if err != nil {
				return err
			}
			var page []string
			if _, err := redis.Scan(reply, &cursor, &page); err != nil {
				return err
			}
			keys = append(keys, page...)
			if cursor == "0" {
				return nil
			}
		}
	})
	return keys, err
}

func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func (q *Queue) importReadyList(ctx context.Context, list, topic string) (int, error) {
	imported := 0
	const page = 500
	offset := 0 // entries we could not import stay; skip past them
	for {
		var ids []string
		err := q.withConn(ctx, list, func(c redis.Conn) error {
			var err error
			ids, err = redis.Strings(c.Do("LRANGE", list, offset, offset+page-1))
			return err
		})
		if err != nil {
			return imported, fmt.Errorf("import: read %s: %w", list, err)
		}
		for _, id := range ids {
			ok, err := q.importOne(ctx, id, "ready", topic, list, "", 0)
			if err != nil {
				return imported, err
			}
			if ok {
				imported++
			} else {
				offset++
			}
		}
		if len(ids) < page {
			return imported, nil
		}
	}
}

func (q *Queue) importBucket(ctx context.Context, bucket string) (int, error) {
	imported := 0
	offset := 0 // members we could not import stay; skip past them
	for {
		var reply []string
		err := q.withConn(ctx, bucket, func(c redis.Conn) error {
			var err error
			reply, err = redis.Strings(c.Do("ZRANGEBYSCORE", bucket, "-inf", legacySecondsLimit, "WITHSCORES", "LIMIT", offset, 500))
			return err
		})
		if err != nil {
			return imported, fmt.Errorf("import: read %s: %w", bucket, err)
		}
		if len(reply) == 0 {
			return imported, nil
		}
		for i := 0; i+1 < len(reply); i += 2 {
			id := reply[i]
			seconds := atoi(reply[i+1])
			ok, err := q.importOne(ctx, id, "bucket", "", "", bucket, seconds*1000)
			if err != nil {
				return imported, err
			}
			if ok {
				imported++
			} else {
				offset++
			}
		}
	}
}

// importOne converts the raw job id (from the ready list readyList, or from
// bucket, scheduled at atMs). It reports whether it converted it.
func (q *Queue) importOne(ctx context.Context, id, mode, topic, readyList, bucket string, atMs int64) (bool, error) {
	var raw []byte
	err := q.withConn(ctx, id, func(c redis.Conn) error {
		var err error
		raw, err = redis.Bytes(c.Do("GET", id))
		if err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
			return redis.ErrNil
		}
		return err
	})
	if errors.Is(err, redis.ErrNil) {
		return false, nil // no job of the original behind this id
	}
	if err != nil {
		return false, fmt.Errorf("import %s: %w", id, err)
	}
	job, err := decodeLegacyJob(raw)
	if err != nil {
		q.log.Warn("import: cannot decode a job of the original server; left as it is", "job_id", id, "err", err)
		return false, nil
	}
	if topic == "" {
		topic = job.Topic
	}
	if err := ValidateJob(Job{Topic: topic, ID: id, TTR: clampTTR(job.TTR)}); err != nil {
		q.log.Warn("import: invalid job of the original server; left as it is", "job_id", id, "err", err)
		return false, nil
	}
	if readyList == "" {
		readyList = q.keys.legacyReady(topic)
	}
	if bucket == "" {
		bucket = q.keys.bucketName(1)
	}
	p := q.partitionOf(id)
	result, err := redis.Int(q.migrationCall(ctx, p, q.scripts.importV0, []string{id, bucket, readyList},
		id, raw, topic, job.Delay*1000, int64(clampTTR(job.TTR).Seconds()), job.Body, mode, atMs))
	if err != nil {
		return false, fmt.Errorf("import %s: %w", id, err)
	}
	return result == 1, nil
}

func clampTTR(ttr int64) time.Duration {
	switch {
	case ttr < 1:
		ttr = 1
	case ttr > int64(MaxTTR.Seconds()):
		ttr = int64(MaxTTR.Seconds())
	}
	return time.Duration(ttr) * time.Second
}

// decodeLegacyJob decodes the msgpack the original server wrote. Its
// library encoded the struct as a map keyed by field name; an array in
// field order is accepted too. Keys match case-insensitively.
func decodeLegacyJob(b []byte) (legacyJob, error) {
	d := &msgpackDecoder{b: b}
	v, err := d.value(0)
	if err != nil {
		return legacyJob{}, err
	}
	var job legacyJob
	set := func(name string, val any) error {
		var err error
		switch strings.ToLower(name) {
		case "topic":
			job.Topic, err = msgpackString(val)
		case "id":
			job.ID, err = msgpackString(val)
		case "delay":
			job.Delay, err = msgpackInt(val)
		case "ttr":
			job.TTR, err = msgpackInt(val)
		case "body":
			job.Body, err = msgpackString(val)
		}
		if err != nil {
			return fmt.Errorf("field %s: %w", name, err)
		}
		return nil
	}
	switch v := v.(type) {
	case map[string]any:
		for k, val := range v {
			if err := set(k, val); err != nil {
				return job, err
			}
		}
	case []any:
		for i, name := range []string{"topic", "id", "delay", "ttr", "body"} {
			if i < len(v) {
				if err := set(name, v[i]); err != nil {
					return job, err
				}
			}
		}
	default:
		return job, fmt.Errorf("not a msgpack map or array")
	}
	if d.pos != len(b) {
		return job, fmt.Errorf("%d bytes after the msgpack value", len(b)-d.pos)
	}
	return job, nil
}

func msgpackString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("want a string, got %T", v)
}

func msgpackInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case uint64:
		if v > math.MaxInt64 {
			return 0, fmt.Errorf("integer out of range")
		}
		return int64(v), nil
	case float64:
		return int64(v), nil
	case nil:
		return 0, nil
	}
	return 0, fmt.Errorf("want an integer, got %T", v)
}

// msgpackDecoder reads the msgpack subset a Go struct encodes to.
type msgpackDecoder struct {
	b   []byte
	pos int
}

var errShort = errors.New("msgpack value cut short")

func (d *msgpackDecoder) take(n int) ([]byte, error) {
	if n < 0 || d.pos+n > len(d.b) {
		return nil, errShort
	}
	p := d.b[d.pos : d.pos+n]
	d.pos += n
	return p, nil
}

func (d *msgpackDecoder) uint(n int) (uint64, error) {
	p, err := d.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

func (d *msgpackDecoder) value(depth int) (any, error) {
	if depth > 8 {
		return nil, fmt.Errorf("msgpack nested too deep")
	}
	p, err := d.take(1)
	if err != nil {
		return nil, err
	}
	c := p[0]
	switch {
	case c <= 0x7f:
		return int64(c), nil
	case c >= 0xe0:
		return int64(int8(c)), nil
	case c >= 0xa0 && c <= 0xbf:
		return d.str(int(c & 0x1f))
	case c >= 0x90 && c <= 0x9f:
		return d.array(int(c&0x0f), depth)
	case c >= 0x80 && c <= 0x8f:
		return d.mapping(int(c&0x0f), depth)
	}
	switch c {
	case 0xc0:
		return nil, nil
	case 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	case 0xc4, 0xd9:
		n, err := d.uint(1)
		if err != nil {
			return nil, err
		}
		return d.str(int(n))
	case 0xc5, 0xda:
		n, err := d.uint(2)
		if err != nil {
			return nil, err
		}
		return d.str(int(n))
	case 0xc6, 0xdb:
		n, err := d.uint(4)
		if err != nil {
			return nil, err
		}
		return d.str(int(n))
	case 0xca:
		n, err := d.uint(4)
		return float64(math.Float32frombits(uint32(n))), err
	case 0xcb:
		n, err := d.uint(8)
		return math.Float64frombits(n), err
	case 0xcc, 0xcd, 0xce, 0xcf:
		n, err := d.uint(1 << (c - 0xcc))
		return n, err
	case 0xd0:
		n, err := d.uint(1)
		return int64(int8(n)), err
	case 0xd1:
		n, err := d.uint(2)
		return int64(int16(n)), err
	case 0xd2:
		n, err := d.uint(4)
		return int64(int32(n)), err
	case 0xd3:
		p, err := d.take(8)
		if err != nil {
			return nil, err
		}
		return int64(binary.BigEndian.Uint64(p)), nil
	case 0xdc:
		n, err := d.uint(2)
		if err != nil {
			return nil, err
		}
		return d.array(int(n), depth)
	case 0xdd:
		n, err := d.uint(4)
		if err != nil {
			return nil, err
		}
		return d.array(int(n), depth)
	case 0xde:
		n, err := d.uint(2)
		if err != nil {
			return nil, err
		}
		return d.mapping(int(n), depth)
	case 0xdf:
		n, err := d.uint(4)
		if err != nil {
			return nil, err
		}
		return d.mapping(int(n), depth)
	}
	return nil, fmt.Errorf("unsupported msgpack type byte 0x%02x", c)
}

func (d *msgpackDecoder) str(n int) (any, error) {
	p, err := d.take(n)
	if err != nil {
		return nil, err
	}
	return string(p), nil
}

func (d *msgpackDecoder) array(n, depth int) (any, error) {
	if n > len(d.b) {
		return nil, errShort
	}
	out := make([]any, 0, n)
	for i := 0; i < n; i++ {
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func (d *msgpackDecoder) mapping(n, depth int) (any, error) {
	if n > len(d.b) {
		return nil, errShort
	}
	out := make(map[string]any, n)
	for i := 0; i < n; i++ {
		k, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		ks, ok := k.(string)
		if !ok {
			return nil, fmt.Errorf("msgpack map key is %T, not a string", k)
		}
		v, err := d.value(depth + 1)
		if err != nil {
			return nil, err
		}
		out[ks] = v
	}
	return out, nil
}
