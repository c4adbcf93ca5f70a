package delayqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
)

// legacySecondsLimit separates the original server's bucket scores (unix
// seconds, about 1.8e9) from ours (unix milliseconds, about 1.8e12).
const legacySecondsLimit = 100_000_000_000

// legacyJob is a job as the original ouqiang/delay-queue stored it under
// the raw id as key: its Go struct Job{Topic, Id, Delay, TTR, Body},
// encoded by github.com/vmihailenco/msgpack (see decodeLegacyJob).
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
func (q *Queue) importV0(ctx context.Context) (importTally, error) {
	var tally importTally
	lists, err := q.scanKeys(ctx, globEscape(q.keys.readyPrefix)+"*"+globEscape(q.keys.readySuffix), "list")
	if err != nil {
		return tally, fmt.Errorf("import: list ready lists: %w", err)
	}
	for _, list := range lists {
		topic := strings.TrimSuffix(strings.TrimPrefix(list, q.keys.readyPrefix), q.keys.readySuffix)
		if err := q.importReadyList(ctx, list, topic, &tally); err != nil {
			return tally, err
		}
	}
	buckets, err := q.scanKeys(ctx, globEscape(q.keys.bucketPrefix)+"*"+globEscape(q.keys.bucketSuffix), "zset")
	if err != nil {
		return tally, fmt.Errorf("import: list buckets: %w", err)
	}
	for _, bucket := range buckets {
		if err := q.importBucket(ctx, bucket, &tally); err != nil {
			return tally, err
		}
	}
	return tally, nil
}

// importTally counts the original's jobs imported, and those left as they
// were because they do not decode or this server refuses them (each
// logged).
type importTally struct{ imported, left int }

// scanKeys lists the keys matching pattern of a type, on a standalone
// Redis (the old layouts never ran on a cluster).
func (q *Queue) scanKeys(ctx context.Context, pattern, typ string) ([]string, error) {
	var keys []string
	err := q.withConn(ctx, q.partitions[0].key(), func(c redis.Conn) error {
		var err error
		keys, err = scanOn(c, keys, pattern, typ)
		return err
	})
	return keys, err
}

// scanOn appends to keys those matching pattern, of type typ when set, on
// the server of c.
func scanOn(c redis.Conn, keys []string, pattern, typ string) ([]string, error) {
	cursor := "0"
	for {
		args := []any{cursor, "MATCH", pattern, "COUNT", 1000}
		if typ != "" {
			args = append(args, "TYPE", typ)
		}
		reply, err := redis.Values(c.Do("SCAN", args...))
		if err != nil {
			return keys, err
		}
		var page []string
		if _, err := redis.Scan(reply, &cursor, &page); err != nil {
			return keys, err
		}
		keys = append(keys, page...)
		if cursor == "0" {
			return keys, nil
		}
	}
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

func (q *Queue) importReadyList(ctx context.Context, list, topic string, tally *importTally) error {
	err := q.walkOldList(ctx, list, func(id string) (bool, error) {
		return q.importOne(ctx, id, "ready", topic, list, "", 0, tally)
	})
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	return nil
}

// walkOldList hands take the ids of an older layout's list, in order, page
// by page, while take moves them out of it: it reports whether id left the
// list. The ids that stay are skipped past.
func (q *Queue) walkOldList(ctx context.Context, list string, take func(id string) (left bool, err error)) error {
	const page = 500
	offset := 0
	for {
		var ids []string
		err := q.withConn(ctx, list, func(c redis.Conn) error {
			var err error
			ids, err = redis.Strings(c.Do("LRANGE", list, offset, offset+page-1))
			return err
		})
		if err != nil {
			return fmt.Errorf("read %s: %w", list, err)
		}
		for _, id := range ids {
			left, err := take(id)
			if err != nil {
				return err
			}
			if !left {
				offset++
			}
		}
		if len(ids) < page {
			return nil
		}
	}
}

func (q *Queue) importBucket(ctx context.Context, bucket string, tally *importTally) error {
	offset := 0 // members we could not import stay; skip past them
	for {
		var reply []string
		err := q.withConn(ctx, bucket, func(c redis.Conn) error {
			var err error
			reply, err = redis.Strings(c.Do("ZRANGEBYSCORE", bucket, "-inf", legacySecondsLimit, "WITHSCORES", "LIMIT", offset, 500))
			return err
		})
		if err != nil {
			return fmt.Errorf("import: read %s: %w", bucket, err)
		}
		if len(reply) == 0 {
			return nil
		}
		for i := 0; i+1 < len(reply); i += 2 {
			id := reply[i]
			seconds := atoi(reply[i+1])
			ok, err := q.importOne(ctx, id, "bucket", "", "", bucket, seconds*1000, tally)
			if err != nil {
				return err
			}
			if !ok {
				offset++
			}
		}
	}
}

// importOne converts the raw job id (from the ready list readyList, or from
// bucket, scheduled at atMs), and counts it in tally. It reports whether it
// converted it.
func (q *Queue) importOne(ctx context.Context, id, mode, topic, readyList, bucket string, atMs int64, tally *importTally) (bool, error) {
	var raw []byte
	err := q.withConn(ctx, id, func(c redis.Conn) error {
		var err error
		raw, err = redis.Bytes(c.Do("GET", id))
		if errors.Is(err, redis.ErrNil) || err != nil && strings.HasPrefix(err.Error(), "WRONGTYPE") {
			// No job of the original behind this id: Redis answered, and
			// no outage is noted.
			raw, err = nil, nil
		}
		return err
	})
	if err != nil {
		return false, fmt.Errorf("import %s: %w", id, err)
	}
	if raw == nil {
		return false, nil
	}
	job, err := decodeLegacyJob(raw)
	if err != nil {
		q.log.Warn("import: cannot decode a job of the original server; left as it is", "job_id", id, "err", err)
		tally.left++
		return false, nil
	}
	if topic == "" {
		topic = job.Topic
	}
	if err := ValidateJob(Job{Topic: topic, ID: id, TTR: clampTTR(job.TTR)}); err != nil {
		q.log.Warn("import: invalid job of the original server; left as it is", "job_id", id, "err", err)
		tally.left++
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
	if result == 1 {
		tally.imported++
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

// legacyMaxDepth bounds the nesting the import reads: the original's jobs
// are flat, and a corrupt value must not recurse without end.
const legacyMaxDepth = 8

// decodeLegacyJob decodes a job the original server wrote with
// vmihailenco/msgpack: a map keyed by tag or field name (in any case), or
// an array in field order. Unknown fields are skipped and missing ones
// are zero; a nil is a zero, and an integer of any width or a float
// (truncated) fills an integer field. Anything else is refused, and the
// import leaves the job as it is.
func decodeLegacyJob(raw []byte) (legacyJob, error) {
	r := bytes.NewReader(raw)
	v, err := decodeLegacyValue(msgpack.NewDecoder(r), 0)
	if err != nil {
		return legacyJob{}, err
	}
	if r.Len() > 0 {
		return legacyJob{}, fmt.Errorf("%d bytes after the msgpack value", r.Len())
	}
	var job legacyJob
	switch v := v.(type) {
	case map[string]any:
		for key, value := range v {
			if err := job.set(key, value); err != nil {
				return legacyJob{}, err
			}
		}
	case []any:
		// In field order, which is the order of v0.4's tags.
		for i, value := range v[:min(len(v), 5)] {
			if err := job.set(strconv.Itoa(i+1), value); err != nil {
				return legacyJob{}, err
			}
		}
	default:
		return legacyJob{}, fmt.Errorf("not a msgpack map or array but %T", v)
	}
	return job, nil
}

// set sets the field keyed key, in any case: v0.4 tags the fields
// msgpack:"1" to "5", and the library keys them so; v0.2 and v0.3 had no
// msgpack tags, and it keyed them by Go field name. Other keys are
// ignored.
func (job *legacyJob) set(key string, value any) error {
	var err error
	switch strings.ToLower(key) {
	case "1", "topic":
		job.Topic, err = legacyString(value)
	case "2", "id":
		job.ID, err = legacyString(value)
	case "3", "delay":
		job.Delay, err = legacyInt(value)
	case "4", "ttr":
		job.TTR, err = legacyInt(value)
	case "5", "body":
		job.Body, err = legacyString(value)
	}
	if err != nil {
		return fmt.Errorf("field %s: %w", key, err)
	}
	return nil
}

func legacyString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case nil:
		return "", nil
	}
	return "", fmt.Errorf("want a string, got %T", v)
}

func legacyInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case uint64:
		if v > math.MaxInt64 {
			return 0, fmt.Errorf("integer %d out of range", v)
		}
		return int64(v), nil
	case float64:
		return int64(v), nil
	case nil:
		return 0, nil
	}
	return 0, fmt.Errorf("want an integer, got %T", v)
}

// decodeLegacyValue reads one value at depth with the library: nil, a
// bool, a string (str or bin), a float64, a uint64 when it takes 8 bytes
// (it may not fit an int64), an int64 for every other integer, a
// map[string]any (a key given twice keeps its last value) or an []any.
// An extension type or a map key that is no string is refused: a Go
// struct does not encode to those.
func decodeLegacyValue(d *msgpack.Decoder, depth int) (any, error) {
	if depth > legacyMaxDepth {
		return nil, fmt.Errorf("msgpack nested deeper than %d", legacyMaxDepth)
	}
	code, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	switch {
	case code == msgpcode.Nil:
		return nil, d.DecodeNil()
	case code == msgpcode.False || code == msgpcode.True:
		return d.DecodeBool()
	case msgpcode.IsString(code) || msgpcode.IsBin(code):
		return d.DecodeString()
	case code == msgpcode.Float || code == msgpcode.Double:
		return d.DecodeFloat64()
	case code == msgpcode.Uint64:
		return d.DecodeUint64()
	case msgpcode.IsFixedMap(code) || code == msgpcode.Map16 || code == msgpcode.Map32:
		n, err := d.DecodeMapLen()
		if err != nil {
			return nil, err
		}
		m := map[string]any{}
		for range n {
			key, err := decodeLegacyValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			s, ok := key.(string)
			if !ok {
				return nil, fmt.Errorf("msgpack map key is %T, not a string", key)
			}
			if m[s], err = decodeLegacyValue(d, depth+1); err != nil {
				return nil, err
			}
		}
		return m, nil
	case msgpcode.IsFixedArray(code) || code == msgpcode.Array16 || code == msgpcode.Array32:
		n, err := d.DecodeArrayLen()
		if err != nil {
			return nil, err
		}
		var a []any
		for range n {
			v, err := decodeLegacyValue(d, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		return a, nil
	}
	// Every other integer, and an error for what is none (extension
	// types, the reserved byte 0xc1).
	return d.DecodeInt64()
}
