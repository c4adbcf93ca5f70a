// Package defaults owns the defaults that more than one package applies:
// config.Default fills the conf with them, and the engine (delayqueue),
// the HTTP layer (routers), the webhook dispatcher and the metrics fall
// back on them for a zero field of their Options. A default that only
// config applies is written in config.Default alone.
//
// They live in a leaf package, which imports nothing but time, so that
// both sides can import them: config must know nothing of Redis or HTTP,
// so it cannot import the packages that apply them, and those packages
// are libraries configured through their Options, which should not
// depend on the conf file's package.
package defaults

import "time"

// The engine's (delayqueue.Options).
const (
	// BucketSize is the partition count of new data on one Redis, when
	// bucket_size is unset and Redis has no record of one: the
	// original's 3.
	BucketSize = 3
	// ClusterBucketSize is that count on a Redis Cluster: a multiple of 1,
	// 2, 3, 4 and 6 primaries, so that each primary of an evenly split
	// cluster of those sizes holds as many partitions.
	ClusterBucketSize = 12
	// KeyPrefix is key_prefix, the namespace of the engine's keys.
	KeyPrefix = "dq_"
	// QueueBlockTimeout is queue_block_timeout, the longest hold of a
	// /pop: the original's, below redis.read_timeout's default (config).
	QueueBlockTimeout = 178 * time.Second
	// MaxHeldPops is max_held_pops, the /pops one process holds at once.
	MaxHeldPops = 20000
	// DeadMaxPerTopic is dead_max_per_topic, the dead letters kept per
	// topic.
	DeadMaxPerTopic = 10000
	// DeadTTL is dead_ttl, how long dead letters are kept.
	DeadTTL = 7 * 24 * time.Hour
	// RedisWaitTimeout is redis.wait_timeout_ms, the longest a change
	// waits for redis.wait_replicas.
	RedisWaitTimeout = time.Second
)

// The HTTP layer's (routers.Options). Untyped, as config holds them in
// int64 and routers the job body's limit in an int.
const (
	// MaxBodyBytes is max_body_bytes, the largest request body: a batch
	// of jobs fits.
	MaxBodyBytes = 16 << 20
	// MaxJobBodyBytes is max_job_body_bytes, the largest job body.
	MaxJobBodyBytes = 1 << 20
)

// The webhook dispatcher's (webhook.Options).
const (
	// CallbackConcurrency is callback_concurrency, the webhook jobs one
	// process holds at once.
	CallbackConcurrency = 32
	// CallbackPerHost is callback_per_host, the calls in flight to one
	// host.
	CallbackPerHost = 4
	// CallbackShutdownGrace is callback_shutdown_grace, how long calls in
	// flight may go on after SIGTERM.
	CallbackShutdownGrace = 10 * time.Second
)

// MetricsTopicLabels is metrics_topic_labels, the distinct topic labels
// of the metrics (metrics.Options).
const MetricsTopicLabels = 100
