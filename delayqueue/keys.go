package delayqueue

import (
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"

	"github.com/delay-queue/delay-queue/internal/redisconn"
)

// The key schema: every key name the engine uses is built here.
//
// Jobs live in partitions, the buckets of the Youzan design: a job's
// partition comes from its id (crc32 of the id, modulo the partition
// count), so every call about one id goes straight to it. Every key of a
// partition starts with the partition's hash tag, so that Redis Cluster
// keeps them in one slot and one script call can touch all of them:
//
//	{tag}<prefix>jobs        HASH id -> job record (scripts/lib.lua)
//	{tag}<prefix>ready       ZSET "topic,<position>,id": ready jobs per topic
//	{tag}<prefix>delayed     ZSET "topic,<due ms>,id"
//	{tag}<prefix>reserved    ZSET "topic,<lease end ms>,id"
//	{tag}<prefix>dead        ZSET "topic,<death ms>,id"
//	{tag}<prefix>hooks       ZSET "<position>,id": ready webhook jobs
//	{tag}<prefix>timers      ZSET "delay|reserved,<topic>" -> when the scanner must look again
//	{tag}<prefix>counts      HASH "<state>,<topic>" -> jobs; dropped dead letters
//	{tag}<prefix>bodies      HASH id -> body, for long bodies
//	{tag}<prefix>hookwake    LIST tokens that wake the webhook dispatchers
//	{tag}<prefix>wake:<topic>          LIST tokens that wake held pops
//	{tag}<prefix>ctl:<instance>:<loop> LIST that interrupts a blocked loop
//
// The tag is the partition's bucket name (bucket_name with its number),
// with a suffix when one is needed to place the partition's slot (see
// partitionTag). The tag comes first, so no topic or id can change a key's
// slot. One key is not a partition's: <prefix>layout, the partition count
// the data was written with.
//
// queue_name and bucket_name without the tag still name the keys of the
// layouts the engine migrates from: the ready lists and bucket ZSETs of
// ouqiang/delay-queue and of this server's versions before partitions.
type keySchema struct {
	prefix                     string
	bucketPrefix, bucketSuffix string
	readyPrefix, readySuffix   string
}

// splitTemplate cuts a template with exactly one verb (%d or %s) into the
// text before and after it.
func splitTemplate(tmpl, verb string) (string, string, error) {
	if strings.Count(tmpl, "%") != 1 || !strings.Contains(tmpl, verb) {
		return "", "", fmt.Errorf("key template %q must contain exactly one %s and no other %%", tmpl, verb)
	}
	before, after, _ := strings.Cut(tmpl, verb)
	return before, after, nil
}

func newKeySchema(opts Options) (keySchema, error) {
	k := keySchema{prefix: opts.KeyPrefix}
	var err error
	if k.bucketPrefix, k.bucketSuffix, err = splitTemplate(opts.BucketName, "%d"); err != nil {
		return k, err
	}
	if k.readyPrefix, k.readySuffix, err = splitTemplate(opts.QueueName, "%s"); err != nil {
		return k, err
	}
	return k, nil
}

// partitionNumber spreads ids over n partitions, numbered from 1; the same
// id always lands in the same one, so a re-push replaces its own job.
func partitionNumber(id string, n int) int {
	return int(checksumIEEE(id)%uint32(n)) + 1
}

// checksumIEEE is crc32.ChecksumIEEE of the string's bytes, without
// copying them to a slice first (an allocation per push).
func checksumIEEE(s string) uint32 {
	crc := ^uint32(0)
	for i := 0; i < len(s); i++ {
		crc = crc32.IEEETable[byte(crc)^s[i]] ^ crc>>8
	}
	return ^crc
}

// bucketName is bucket_name with the number n: the original's bucket ZSET,
// and the text of partition n's tag.
func (k keySchema) bucketName(n int) string {
	return k.bucketPrefix + strconv.Itoa(n) + k.bucketSuffix
}

// partitionTag is the hash tag of partition n of count: "{" + the bucket
// name + "}", or, when that name's slot is not in the n-th of count equal
// ranges of the slot space, the bucket name with the first suffix ".1",
// ".2"... that puts it there (in the middle half of the range, so that
// rounding in a cluster's slot split cannot move it out). A cluster whose
// primaries split the slots evenly, as redis-cli --cluster create does,
// then holds count/primaries partitions on each primary when the
// primaries divide count.
func (k keySchema) partitionTag(n, count int) string {
	name := k.bucketName(n)
	width := redisconn.SlotCount / count
	lo := (n-1)*redisconn.SlotCount/count + width/4
	hi := (n-1)*redisconn.SlotCount/count + width - width/4
	candidate := name
	for i := 1; ; i++ {
		if s := redisconn.Slot("{" + candidate + "}"); s >= lo && s < hi {
			return "{" + candidate + "}"
		}
		candidate = name + "." + strconv.Itoa(i)
	}
}

// partitionKeyNames are the suffixes of a partition's keys, in the order
// of the scripts' KEYS[1..10] (scripts/lib.lua).
var partitionKeyNames = [...]string{"jobs", "ready", "delayed", "reserved", "dead", "hooks", "timers", "counts", "bodies", "hookwake"}

// Indexes into a partition's keys.
const (
	keyJobs = iota
	keyReady
	keyDelayed
	keyReserved
	keyDead
	keyHooks
	keyTimers
	keyCounts
	keyBodies
	keyHookWake
)

// partitionKeys are the names of partition tag's keys, in script order.
func (k keySchema) partitionKeys(tag string) []string {
	keys := make([]string, len(partitionKeyNames))
	for i, name := range partitionKeyNames {
		keys[i] = tag + k.prefix + name
	}
	return keys
}

func (k keySchema) wake(tag, topic string) string { return tag + k.prefix + "wake:" + topic }

func (k keySchema) wakePrefix(tag string) string { return tag + k.prefix + "wake:" }

func (k keySchema) control(tag, instance string, loop int) string {
	return k.controlPrefix(tag) + instance + ":" + strconv.Itoa(loop)
}

func (k keySchema) controlPrefix(tag string) string { return tag + k.prefix + "ctl:" }

func (k keySchema) layout() string { return k.prefix + "layout" }

// topicRange is the ZRANGEBYLEX bounds of a topic's members in an index
// (scripts/lib.lua topic_range): "topic," starts them, and "-"
// follows ",".
func topicRange(topic string) (lo, hi string) { return "[" + topic + ",", "(" + topic + "-" }

// topicBound is a ZRANGEBYLEX bound before the members of topic at ms: a
// "[" bound includes them, a "(" bound stops before them.
func topicBound(topic string, ms int64, kind byte) string {
	return string(kind) + topic + "," + fmt.Sprintf("%013d", ms) + ","
}

// The keys of the layouts the engine migrates from.

func (k keySchema) legacyReady(topic string) string { return k.readyPrefix + topic + k.readySuffix }

func (k keySchema) v1JobPrefix() string { return k.prefix + "job:" }

func (k keySchema) v1Dead(topic string) string { return k.prefix + "dead:" + topic }

func (k keySchema) v1Topics() string { return k.prefix + "topics" }

func (k keySchema) v1DeadDropped() string { return k.prefix + "dead_dropped" }

func (k keySchema) v1Hooks() string { return k.prefix + "hooks" }

func (k keySchema) v1HookWake() string { return k.prefix + "wake_hooks" }

// partitionOf is the partition holding the job with id.
func (q *Queue) partitionOf(id string) *partition {
	return q.partitions[partitionNumber(id, len(q.partitions))-1]
}

// key is the partition's first key: the one routing its calls.
func (p *partition) key() string { return p.keys[keyJobs].(string) }

// keyAt is the partition's key at index i (keyJobs...).
func (p *partition) keyAt(i int) string { return p.keys[i].(string) }
