// Package config owns the server's settings: their defaults, reading them
// from an ini file in the original ouqiang/delay-queue format, and checking
// that they make sense together. It knows nothing of Redis or HTTP.
package config

import (
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/internal/defaults"
)

// EmbeddedHost is the redis.host value that asks for an in-process
// miniredis instead of a Redis server.
const EmbeddedHost = "embedded"

// Log formats accepted by log_format.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// Config holds every setting of the server. Durations are stored as
// time.Duration; the file gives them in whole seconds or milliseconds, as
// each key's documentation says.
type Config struct {
	// BindAddress is where the HTTP server listens (bind_address).
	BindAddress string
	// BucketSize is the number of partitions the jobs spread over
	// (bucket_size); 0 when the file leaves it unset (or says 0): the count recorded
	// in Redis is used then, else defaults.BucketSize, or
	// defaults.ClusterBucketSize on a Redis Cluster.
	BucketSize int
	// BucketName is the bucket key template with one %d (bucket_name).
	BucketName string
	// QueueName is the ready-list key template with one %s, the topic
	// (queue_name).
	QueueName string
	// QueueBlockTimeout is the longest a /pop is held (queue_block_timeout,
	// seconds).
	QueueBlockTimeout time.Duration
	// KeyPrefix namespaces job hashes and the engine's other keys
	// (key_prefix).
	KeyPrefix string
	// MaxBodyBytes caps an HTTP request body (max_body_bytes).
	MaxBodyBytes int64
	// MaxJobBodyBytes caps one job's body (max_job_body_bytes).
	MaxJobBodyBytes int64
	// ReadHeaderTimeout bounds reading a request's headers
	// (read_header_timeout, seconds).
	ReadHeaderTimeout time.Duration
	// ReadBodyTimeout bounds reading a request's body, from the end of its
	// headers (read_body_timeout, seconds).
	ReadBodyTimeout time.Duration
	// WriteTimeout bounds writing an answer (write_timeout, seconds), from
	// when it is written: a client that stops reading its answers loses its
	// connection then.
	WriteTimeout time.Duration
	// IdleTimeout closes keep-alive connections left idle this long
	// (idle_timeout, seconds).
	IdleTimeout time.Duration
	// HTTPFastPath serves the job endpoints' plain requests with the
	// server's own HTTP/1.1 code (internal/http1) instead of net/http
	// (http_fast_path; true by default). Answers are the same either way.
	HTTPFastPath bool
	// ShutdownTimeout bounds a graceful shutdown (shutdown_timeout, seconds).
	ShutdownTimeout time.Duration
	// DeadMaxPerTopic caps each topic's dead letters; the oldest are dropped
	// (dead_max_per_topic).
	DeadMaxPerTopic int
	// DeadTTL is how long dead letters are kept (dead_ttl, seconds).
	DeadTTL time.Duration
	// LogLevel is the least severe level logged (log_level).
	LogLevel slog.Level
	// LogFormat is LogFormatText or LogFormatJSON (log_format).
	LogFormat string
	// AuthToken, when not empty, is the bearer token every API request must
	// carry (auth_token; the DQ_AUTH_TOKEN environment variable wins, see
	// ApplyEnv).
	AuthToken string
	// MetricsAuth makes GET /metrics require the token too (metrics_auth).
	MetricsAuth bool
	// AllowedHosts lists the DNS names by which browsers may call the API
	// without the token, besides IP addresses and localhost (allowed_hosts,
	// comma-separated; empty by default).
	AllowedHosts []string
	// MetricsTopicLabels caps the distinct topic labels of the metrics; the
	// other topics are counted as "other" (metrics_topic_labels).
	MetricsTopicLabels int
	// MaxHeldPops caps the /pop requests this process holds at once; more
	// are refused (max_held_pops).
	MaxHeldPops int
	// DebugAddr, when not empty, is where a second listener serves
	// net/http/pprof (debug_addr).
	DebugAddr string
	// CallbackSecret signs webhook calls (callback_secret; the
	// DQ_CALLBACK_SECRET environment variable wins).
	CallbackSecret string
	// CallbackAllow lists hosts, .suffixes and CIDRs webhooks may call
	// although they are not public (callback_allow, comma-separated).
	CallbackAllow []string
	// CallbackConcurrency caps the webhook jobs one process holds at once
	// (callback_concurrency).
	CallbackConcurrency int
	// CallbackPerHost caps the webhook calls in flight to one host
	// (callback_per_host).
	CallbackPerHost int
	// CallbackShutdownGrace is how long webhook calls in flight may go on
	// after SIGTERM (callback_shutdown_grace, seconds).
	CallbackShutdownGrace time.Duration
	// Redis says how to reach Redis (the redis.* keys).
	Redis Redis
}

// Redis holds the redis.* settings.
type Redis struct {
	// Host is host:port, or EmbeddedHost (redis.host).
	Host string
	// DB is the database number (redis.db).
	DB int
	// Password is sent with AUTH when not empty (redis.password).
	Password string
	// MaxIdle is the pool's idle connection cap (redis.max_idle).
	MaxIdle int
	// MaxActive is the pool's connection cap; 0 lets the engine pick
	// (redis.max_active).
	MaxActive int
	// ConnectTimeout bounds dialing (redis.connect_timeout, ms).
	ConnectTimeout time.Duration
	// ReadTimeout bounds waiting for a reply; it must exceed
	// QueueBlockTimeout (redis.read_timeout, ms).
	ReadTimeout time.Duration
	// WriteTimeout bounds sending a command (redis.write_timeout, ms).
	WriteTimeout time.Duration
	// Username is the ACL user sent with Password (redis.username); empty
	// means the default user.
	Username string
	// TLS encrypts the connections to Redis and to the sentinels
	// (redis.tls).
	TLS bool
	// TLSCAFile is a PEM file of the CAs trusted to sign the server's
	// certificate; empty means the system's roots (redis.tls_ca_file).
	TLSCAFile string
	// TLSServerName is the name the server's certificate must carry; empty
	// means the host dialed (redis.tls_server_name).
	TLSServerName string
	// SentinelAddrs lists the sentinels (host:port) asked for the primary;
	// when set, Host is ignored (redis.sentinel_addrs, comma-separated).
	SentinelAddrs []string
	// MasterName is the name the sentinels monitor the primary under
	// (redis.master_name).
	MasterName string
	// ClusterAddrs lists seed nodes of a Redis Cluster (host:port); when
	// set, Host is ignored and DB must be 0 (redis.cluster_addrs,
	// comma-separated).
	ClusterAddrs []string
	// WaitReplicas, when above 0, makes every acknowledged change wait
	// until that many replicas have it (redis.wait_replicas).
	WaitReplicas int
	// WaitTimeout bounds that wait (redis.wait_timeout_ms).
	WaitTimeout time.Duration
}

// Cluster reports whether Redis is a cluster (redis.cluster_addrs).
func (r Redis) Cluster() bool { return len(r.ClusterAddrs) > 0 }

// Sentinel reports whether the primary is found through Redis Sentinel.
func (r Redis) Sentinel() bool { return len(r.SentinelAddrs) > 0 }

// Embedded reports whether redis.host asks for an in-process miniredis.
func (r Redis) Embedded() bool { return r.Host == EmbeddedHost }

// Default returns the settings used when no file is given. The original's
// keys keep the original's defaults. It lists every key's default: those
// another package applies too come from internal/defaults, which owns
// them; the others are written here only.
func Default() Config {
	return Config{
		BindAddress:           "0.0.0.0:9277",
		BucketSize:            0,
		BucketName:            "dq_bucket_%d",
		QueueName:             "dq_queue_%s",
		QueueBlockTimeout:     defaults.QueueBlockTimeout,
		KeyPrefix:             defaults.KeyPrefix,
		MaxBodyBytes:          defaults.MaxBodyBytes,
		MaxJobBodyBytes:       defaults.MaxJobBodyBytes,
		ReadHeaderTimeout:     10 * time.Second,
		ReadBodyTimeout:       120 * time.Second,
		WriteTimeout:          60 * time.Second,
		IdleTimeout:           240 * time.Second,
		HTTPFastPath:          true,
		ShutdownTimeout:       30 * time.Second,
		DeadMaxPerTopic:       defaults.DeadMaxPerTopic,
		DeadTTL:               defaults.DeadTTL,
		LogLevel:              slog.LevelInfo,
		LogFormat:             LogFormatText,
		AuthToken:             "",
		MetricsAuth:           false,
		MetricsTopicLabels:    defaults.MetricsTopicLabels,
		MaxHeldPops:           defaults.MaxHeldPops,
		DebugAddr:             "",
		CallbackConcurrency:   defaults.CallbackConcurrency,
		CallbackPerHost:       defaults.CallbackPerHost,
		CallbackShutdownGrace: defaults.CallbackShutdownGrace,
		Redis: Redis{
			Host:           "127.0.0.1:6379",
			DB:             1,
			Password:       "",
			MaxIdle:        10,
			MaxActive:      0,
			ConnectTimeout: 5000 * time.Millisecond,
			ReadTimeout:    180000 * time.Millisecond,
			WriteTimeout:   3000 * time.Millisecond,
			WaitReplicas:   0,
			WaitTimeout:    defaults.RedisWaitTimeout,
		},
	}
}

// AuthTokenEnv names the environment variable that sets the auth token. A
// non-empty value wins over auth_token in the file, so the secret can stay
// out of it.
const AuthTokenEnv = "DQ_AUTH_TOKEN"

// CallbackSecretEnv names the environment variable that sets
// callback_secret; a non-empty value wins over the file.
const CallbackSecretEnv = "DQ_CALLBACK_SECRET"

// ApplyEnv overrides settings from the environment, read through lookup
// (os.LookupEnv in the server): DQ_AUTH_TOKEN and DQ_CALLBACK_SECRET, when
// set and not empty, replace auth_token and callback_secret. Call Validate afterwards. It reports the variables
// it applied, for the log.
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) []string {
	var applied []string
	if token, ok := lookup(AuthTokenEnv); ok && token != "" {
		c.AuthToken = token
		applied = append(applied, AuthTokenEnv)
	}
	if secret, ok := lookup(CallbackSecretEnv); ok && secret != "" {
		c.CallbackSecret = secret
		applied = append(applied, CallbackSecretEnv)
	}
	return applied
}

// ParseLogLevel turns a log_level value (debug, info, warn or warning,
// error; any case) into a slog level.
func ParseLogLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%q is not one of debug, info, warn, error", s)
}
