package delayqueue

import (
	"fmt"
	"hash/crc32"
	"strconv"
	"strings"
)

// keySchema builds every Redis key name the engine uses. Scripts receive
// keys through KEYS, or, where they only learn a name inside Lua (the ready
// list of a due job's topic), a prefix and suffix built here.
//
//	job hash:       <prefix>job:<id>        fields t s d r a c k l n b1..bn
//	bucket:         bucket_name % i         ZSET id -> due or lease end, in ms
//	ready list:     queue_name % topic      LIST of ids, oldest first
//	wake-up list:   <prefix>wake:<topic>    LIST of tokens that wake waiters
//	dispatcher:     <prefix>ctl:<instance>:<n>  LIST that interrupts a blocked loop
//	dead letters:   <prefix>dead:<topic>    ZSET id -> time of death, in ms
//	counters:       <prefix>count:<topic>   HASH state -> number of jobs
//	topics:         <prefix>topics          SET of topics holding jobs
//	dropped:        <prefix>dead_dropped    HASH topic -> dead letters dropped
//
// The scripts build the same names from the prefixes and suffixes passed in
// their ARGV header (scripts/lib.lua); the two must agree.
type keySchema struct {
	prefix                     string
	bucketPrefix, bucketSuffix string
	readyPrefix, readySuffix   string
	bucketCount                int
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
	k := keySchema{prefix: opts.KeyPrefix, bucketCount: opts.BucketSize}
	var err error
	if k.bucketPrefix, k.bucketSuffix, err = splitTemplate(opts.BucketName, "%d"); err != nil {
		return k, err
	}
	if k.readyPrefix, k.readySuffix, err = splitTemplate(opts.QueueName, "%s"); err != nil {
		return k, err
	}
	return k, nil
}

func (k keySchema) job(id string) string { return k.prefix + "job:" + id }

func (k keySchema) jobPrefix() string { return k.prefix + "job:" }

// bucketNumber spreads ids over the buckets; the same id always lands in
// the same bucket, so a re-push overwrites its own entry.
func (k keySchema) bucketNumber(id string) int {
	return int(checksumIEEE(id)%uint32(k.bucketCount)) + 1
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

func (k keySchema) bucket(n int) string {
	return k.bucketPrefix + strconv.Itoa(n) + k.bucketSuffix
}

func (k keySchema) ready(topic string) string { return k.readyPrefix + topic + k.readySuffix }

func (k keySchema) wakePrefix() string { return k.prefix + "wake:" }

func (k keySchema) wake(topic string) string { return k.wakePrefix() + topic }

func (k keySchema) dead(topic string) string { return k.prefix + "dead:" + topic }

func (k keySchema) count(topic string) string { return k.prefix + "count:" + topic }

func (k keySchema) topics() string { return k.prefix + "topics" }

func (k keySchema) deadDropped() string { return k.prefix + "dead_dropped" }

func (k keySchema) control(instance string, loop int) string {
	return k.prefix + "ctl:" + instance + ":" + strconv.Itoa(loop)
}
