package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Bounds Validate enforces beyond "positive".
const (
	// MaxBucketSize keeps a typo from starting thousands of bucket scanners.
	MaxBucketSize = 1024
	// MaxJobBodyLimit is Redis' own cap on a string value (512 MiB).
	MaxJobBodyLimit = 512 << 20
)

// Validate checks every setting and the relations between them. The error
// is one line naming each key at fault, in the file's units.
func (c Config) Validate() error {
	var problems []string
	add := func(format string, args ...any) {
		problems = append(problems, fmt.Sprintf(format, args...))
	}

	if p := checkAddress(c.BindAddress, 0); p != "" {
		add("bind_address = %q: %s", c.BindAddress, p)
	}
	if c.BucketSize < 0 || c.BucketSize > MaxBucketSize {
		add("bucket_size = %d: must be between 1 and %d, or 0 (or unset) for the count recorded in Redis", c.BucketSize, MaxBucketSize)
	}
	if strings.ContainsAny(c.BucketName, "{}") {
		add("bucket_name = %q: must not contain { or }: the bucket names become the partitions' hash tags", c.BucketName)
	}
	if p := checkTemplate(c.BucketName, 'd'); p != "" {
		add("bucket_name = %q: %s", c.BucketName, p)
	}
	if p := checkTemplate(c.QueueName, 's'); p != "" {
		add("queue_name = %q: %s", c.QueueName, p)
	}
	if strings.Replace(c.BucketName, "%d", "", 1) == strings.Replace(c.QueueName, "%s", "", 1) {
		add("bucket_name = %q and queue_name = %q: must differ outside %%d and %%s, or bucket 1 and topic \"1\" share a key",
			c.BucketName, c.QueueName)
	}
	if c.QueueBlockTimeout < time.Second {
		add("queue_block_timeout = %s: must be at least 1", seconds(c.QueueBlockTimeout))
	} else if c.Redis.ReadTimeout > 0 && c.QueueBlockTimeout >= c.Redis.ReadTimeout {
		add("queue_block_timeout = %s (seconds): must be below redis.read_timeout = %s (milliseconds), or a held pop hits the read timeout",
			seconds(c.QueueBlockTimeout), millis(c.Redis.ReadTimeout))
	}
	if c.KeyPrefix == "" {
		add("key_prefix is empty: job keys need a namespace (the default is dq_)")
	}
	if c.MaxBodyBytes < 1 {
		add("max_body_bytes = %d: must be at least 1", c.MaxBodyBytes)
	}
	// A max_job_body_bytes above max_body_bytes is not an error: the request
	// limit then applies first (a conf that lowers only max_body_bytes must
	// still start).
	if c.MaxJobBodyBytes < 1 || c.MaxJobBodyBytes > MaxJobBodyLimit {
		add("max_job_body_bytes = %d: must be between 1 and %d", c.MaxJobBodyBytes, MaxJobBodyLimit)
	}
	for _, d := range []struct {
		key   string
		value time.Duration
	}{
		{"read_header_timeout", c.ReadHeaderTimeout},
		{"read_body_timeout", c.ReadBodyTimeout},
		{"write_timeout", c.WriteTimeout},
		{"idle_timeout", c.IdleTimeout},
		{"shutdown_timeout", c.ShutdownTimeout},
	} {
		if d.value < time.Second {
			add("%s = %s: must be at least 1", d.key, seconds(d.value))
		}
	}
	if c.CallbackConcurrency < 1 {
		add("callback_concurrency = %d: must be at least 1", c.CallbackConcurrency)
	}
	// Above callback_concurrency, callback_per_host and a grace not below
	// shutdown_timeout are capped where they are used (see
	// CallbackLimits), so that lowering one key alone never stops a start.
	if c.CallbackPerHost < 1 {
		add("callback_per_host = %d: must be at least 1", c.CallbackPerHost)
	}
	if c.CallbackShutdownGrace < time.Second {
		add("callback_shutdown_grace = %s: must be at least 1", seconds(c.CallbackShutdownGrace))
	}
	if c.DeadMaxPerTopic < 1 {
		add("dead_max_per_topic = %d: must be at least 1", c.DeadMaxPerTopic)
	}
	if c.DeadTTL < time.Second {
		add("dead_ttl = %s: must be at least 1", seconds(c.DeadTTL))
	}
	if p := checkAuthToken(c.AuthToken); p != "" {
		// The value itself is never shown: it is a secret.
		add("auth_token (or %s): %s", AuthTokenEnv, p)
	}
	if c.MetricsAuth && c.AuthToken == "" {
		add("metrics_auth = true needs auth_token (or %s): there is no token to require", AuthTokenEnv)
	}
	for _, host := range c.AllowedHosts {
		if !isHostName(host) {
			add("allowed_hosts: %q is not a host name: list names alone, without scheme, port or wildcard "+
				"(IP addresses and localhost need no entry)", host)
		}
	}
	if c.MetricsTopicLabels < 1 {
		add("metrics_topic_labels = %d: must be at least 1", c.MetricsTopicLabels)
	}
	if c.MaxHeldPops < 1 {
		add("max_held_pops = %d: must be at least 1", c.MaxHeldPops)
	}
	if c.DebugAddr != "" {
		if p := checkAddress(c.DebugAddr, 0); p != "" {
			add("debug_addr = %q: %s, or empty to turn it off", c.DebugAddr, p)
		} else if c.DebugAddr == c.BindAddress && !strings.HasSuffix(c.DebugAddr, ":0") {
			add("debug_addr = %q: must differ from bind_address", c.DebugAddr)
		}
	}
	if c.LogFormat != LogFormatText && c.LogFormat != LogFormatJSON {
		add("log_format = %q: must be %s or %s", c.LogFormat, LogFormatText, LogFormatJSON)
	}

	// With Sentinel, redis.host is not used (unless it asks for the
	// embedded Redis, which ignores every setting for a remote one).
	if !c.Redis.Embedded() && !c.Redis.Sentinel() && !c.Redis.Cluster() {
		if p := checkAddress(c.Redis.Host, 1); p != "" {
			add("redis.host = %q: %s, or %s", c.Redis.Host, p, EmbeddedHost)
		}
	}
	if c.Redis.DB < 0 {
		add("redis.db = %d: must not be negative", c.Redis.DB)
	}
	if c.Redis.MaxIdle < 0 {
		add("redis.max_idle = %d: must not be negative", c.Redis.MaxIdle)
	}
	if c.Redis.MaxActive < 0 {
		add("redis.max_active = %d: must not be negative (0 lets the server choose)", c.Redis.MaxActive)
	}
	if c.Redis.ConnectTimeout < 0 {
		add("redis.connect_timeout = %s: must not be negative (0 means no timeout)", millis(c.Redis.ConnectTimeout))
	}
	if c.Redis.ReadTimeout < 0 {
		add("redis.read_timeout = %s: must not be negative (0 means no timeout)", millis(c.Redis.ReadTimeout))
	}
	if c.Redis.WriteTimeout < 0 {
		add("redis.write_timeout = %s: must not be negative (0 means no timeout)", millis(c.Redis.WriteTimeout))
	}
	c.Redis.validateConnectivity(add)

	if len(problems) == 0 {
		return nil
	}
	return errors.New("invalid configuration: " + strings.Join(problems, "; "))
}

// validateConnectivity checks the ACL, TLS, Sentinel and WAIT settings.
func (r Redis) validateConnectivity(add func(format string, args ...any)) {
	if r.Username != "" && r.Password == "" {
		add("redis.username = %q: needs redis.password (an ACL user logs in with both)", r.Username)
	}
	if !r.TLS {
		if r.TLSCAFile != "" {
			add("redis.tls_ca_file is set but redis.tls is false: set redis.tls = true, or the connection is not encrypted")
		}
		if r.TLSServerName != "" {
			add("redis.tls_server_name is set but redis.tls is false: set redis.tls = true, or the connection is not encrypted")
		}
	}
	if r.TLSCAFile != "" {
		if _, err := os.ReadFile(r.TLSCAFile); err != nil {
			add("redis.tls_ca_file = %q: %v", r.TLSCAFile, err)
		}
	}
	switch {
	case r.Sentinel() && r.MasterName == "":
		add("redis.sentinel_addrs is set: redis.master_name must name the primary the sentinels monitor")
	case !r.Sentinel() && r.MasterName != "":
		add("redis.master_name = %q: needs redis.sentinel_addrs, the sentinels to ask for that primary", r.MasterName)
	}
	for _, addr := range r.SentinelAddrs {
		if p := checkAddress(addr, 1); p != "" {
			add("redis.sentinel_addrs: %q: %s", addr, p)
		}
	}
	if r.Cluster() && !r.Embedded() {
		if r.Sentinel() {
			add("redis.cluster_addrs and redis.sentinel_addrs are both set: a cluster fails over by itself; keep one")
		}
		if r.DB != 0 {
			add("redis.cluster_addrs is set but redis.db = %d: a Redis Cluster has only database 0, set redis.db = 0", r.DB)
		}
		for _, addr := range r.ClusterAddrs {
			if p := checkAddress(addr, 1); p != "" {
				add("redis.cluster_addrs: %q: %s", addr, p)
			}
		}
	}
	if r.WaitReplicas < 0 {
		add("redis.wait_replicas = %d: must not be negative (0 turns WAIT off)", r.WaitReplicas)
	}
	switch {
	case r.WaitTimeout < 0:
		add("redis.wait_timeout_ms = %s: must not be negative", millis(r.WaitTimeout))
	case r.WaitReplicas > 0 && r.WaitTimeout < time.Millisecond:
		// WAIT 0 would block until enough replicas answer, however long.
		add("redis.wait_timeout_ms = %s: must be at least 1 when redis.wait_replicas is set", millis(r.WaitTimeout))
	case r.WaitReplicas > 0 && r.ReadTimeout > 0 && r.WaitTimeout >= r.ReadTimeout:
		add("redis.wait_timeout_ms = %s: must be below redis.read_timeout = %s, or a WAIT hits the read timeout",
			millis(r.WaitTimeout), millis(r.ReadTimeout))
	}
}

// MinAuthTokenBytes is the shortest auth_token the server does not warn
// about at start-up: a short token can be guessed.
const MinAuthTokenBytes = 16

// checkAuthToken describes what is wrong with an auth token, or returns "".
// An empty token turns auth off. The token goes in an HTTP header as
// "Bearer <token>", so it must be visible ASCII without spaces.
func checkAuthToken(token string) string {
	if token == "" {
		return ""
	}
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] > '~' {
			return "must be printable ASCII without spaces or control characters (it is sent in the Authorization header)"
		}
	}
	return ""
}

// isHostName reports whether s is a DNS name as browsers send it in Host:
// ASCII letters, digits, '-' and '_' in dot-separated labels, with an
// optional trailing dot. A name with other characters (a port, a scheme, a
// '*') could never match a Host; an internationalized name is written in
// its xn-- form, which is what browsers send.
func isHostName(s string) bool {
	labels := strings.Split(strings.TrimSuffix(s, "."), ".")
	for _, label := range labels {
		if label == "" {
			return false
		}
		for i := 0; i < len(label); i++ {
			ch := label[i]
			if !('a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '-' || ch == '_') {
				return false
			}
		}
	}
	return true
}

// checkAddress describes what is wrong with a host:port address, or returns
// "". The port must be a number no lower than minPort.
func checkAddress(addr string, minPort int) string {
	if addr == "" {
		return "empty, want host:port"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "want host:port"
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < minPort || n > 65535 {
		return fmt.Sprintf("port must be a number from %d to 65535", minPort)
	}
	return ""
}

// checkTemplate describes what is wrong with a key template that must hold
// the verb (d or s) exactly once and no other %, or returns "". Anything
// else would break the key names the engine (and its Lua scripts) build.
func checkTemplate(tmpl string, verb byte) string {
	count := 0
	for i := 0; i < len(tmpl); i++ {
		if tmpl[i] != '%' {
			continue
		}
		if i+1 < len(tmpl) && tmpl[i+1] == verb {
			count++
			i++
			continue
		}
		return fmt.Sprintf("the only %% allowed is one %%%c", verb)
	}
	if count != 1 {
		return fmt.Sprintf("must contain %%%c exactly once", verb)
	}
	return ""
}

// seconds and millis print a duration in the unit its key is written in.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return strconv.FormatInt(int64(d/time.Second), 10)
	}
	return strconv.FormatFloat(d.Seconds(), 'f', -1, 64)
}

func millis(d time.Duration) string {
	if d%time.Millisecond == 0 {
		return strconv.FormatInt(int64(d/time.Millisecond), 10)
	}
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
}

// CallbackLimits returns the webhook calls in flight per host and the
// shutdown grace of webhook calls as the server applies them: per host at
// most callback_concurrency, and the grace at most half of shutdown_timeout.
func (c Config) CallbackLimits() (perHost int, grace time.Duration) {
	perHost, grace = c.CallbackPerHost, c.CallbackShutdownGrace
	if perHost > c.CallbackConcurrency {
		perHost = c.CallbackConcurrency
	}
	if grace > c.ShutdownTimeout/2 {
		grace = c.ShutdownTimeout / 2
	}
	return perHost, grace
}

// JobBodyLimit is the largest job body a request can carry: the smaller of
// max_job_body_bytes and max_body_bytes.
func (c Config) JobBodyLimit() int64 {
	return min(c.MaxJobBodyBytes, c.MaxBodyBytes)
}
