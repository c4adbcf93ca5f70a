package config

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"gopkg.in/ini.v1"
)

// Load reads the ini file at path over Default() and validates the result.
//
// The file uses the original's format: keys such as redis.host sit in the
// root section. A [redis] section holding host, db... is accepted too.
// Values may be quoted ('x' or "x"); an unquoted ; or # preceded by a space
// starts a comment, as in the original (ini.v1 with its default options).
//
// warnings lists what was ignored: unknown keys (old confs carry keys that
// are gone, such as bucket), empty numeric values, and the earlier values
// of a key given more than once (the last one wins, as in the original).
// The error, if any, names the file and the key at fault.
func Load(path string) (Config, []string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, nil, fmt.Errorf("read config: %w", err)
	}
	cfg, warnings, err := Parse(data)
	for i, w := range warnings {
		warnings[i] = path + ": " + w
	}
	if err != nil {
		return Config{}, warnings, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, warnings, nil
}

// Parse reads ini text over Default() and validates the result. See Load.
func Parse(data []byte) (Config, []string, error) {
	// Shadows keep every value of a key given more than once, so that the
	// repeat can be reported; the last one is used.
	file, err := ini.LoadSources(ini.LoadOptions{AllowShadows: true, AllowDuplicateShadowValues: true,
		PreserveEmptyShadowValues: true}, data)
	if err != nil {
		return Config{}, nil, fmt.Errorf("parse ini: %w", err)
	}
	setters := settingSetters()
	cfg := Default()
	var warnings []string
	// writtenAs remembers how each key was spelled, to report a key given
	// both as redis.host and as host in [redis].
	writtenAs := make(map[string]string)
	for _, section := range file.Sections() {
		prefix := ""
		if section.Name() != ini.DefaultSection {
			prefix = section.Name() + "."
		}
		for _, key := range section.Keys() {
			name := prefix + key.Name()
			spelling := key.Name()
			if prefix != "" {
				spelling = "[" + section.Name() + "] " + key.Name()
			}
			set, known := setters[name]
			if !known {
				warnings = append(warnings, fmt.Sprintf("unknown key %s ignored", spelling))
				continue
			}
			if earlier, twice := writtenAs[name]; twice {
				return Config{}, warnings, fmt.Errorf("%s is set twice (as %s and as %s)", name, earlier, spelling)
			}
			writtenAs[name] = spelling
			values := key.ValueWithShadows()
			if len(values) > 1 {
				warnings = append(warnings, fmt.Sprintf("%s is given %d times: the last value is used", spelling, len(values)))
			}
			warning, err := set(&cfg, strings.TrimSpace(values[len(values)-1]))
			if err != nil {
				return Config{}, warnings, fmt.Errorf("%s: %w", name, err)
			}
			if warning != "" {
				warnings = append(warnings, name+": "+warning)
			}
		}
	}
	if _, hostGiven := writtenAs["redis.host"]; hostGiven && !cfg.Redis.Embedded() {
		switch {
		case cfg.Redis.Sentinel():
			warnings = append(warnings, "redis.host is ignored: the primary is the one redis.sentinel_addrs name")
		case cfg.Redis.Cluster() && cfg.Redis.Host != Default().Redis.Host:
			warnings = append(warnings, "redis.host is ignored: the cluster's nodes are found from redis.cluster_addrs")
		}
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, warnings, err
	}
	return cfg, warnings, nil
}

// setter stores one raw value into cfg. It may return a warning to log.
type setter func(cfg *Config, raw string) (warning string, err error)

// settingSetters maps every known key, in its dotted form, to its setter.
func settingSetters() map[string]setter {
	return map[string]setter{
		"bind_address":            stringSetting(func(c *Config) *string { return &c.BindAddress }),
		"bucket_size":             bucketSizeSetting,
		"bucket_name":             stringSetting(func(c *Config) *string { return &c.BucketName }),
		"queue_name":              stringSetting(func(c *Config) *string { return &c.QueueName }),
		"queue_block_timeout":     durationSetting(time.Second, func(c *Config) *time.Duration { return &c.QueueBlockTimeout }),
		"key_prefix":              stringSetting(func(c *Config) *string { return &c.KeyPrefix }),
		"max_body_bytes":          int64Setting(func(c *Config) *int64 { return &c.MaxBodyBytes }),
		"max_job_body_bytes":      int64Setting(func(c *Config) *int64 { return &c.MaxJobBodyBytes }),
		"read_header_timeout":     durationSetting(time.Second, func(c *Config) *time.Duration { return &c.ReadHeaderTimeout }),
		"read_body_timeout":       durationSetting(time.Second, func(c *Config) *time.Duration { return &c.ReadBodyTimeout }),
		"write_timeout":           durationSetting(time.Second, func(c *Config) *time.Duration { return &c.WriteTimeout }),
		"idle_timeout":            durationSetting(time.Second, func(c *Config) *time.Duration { return &c.IdleTimeout }),
		"http_fast_path":          boolSetting(func(c *Config) *bool { return &c.HTTPFastPath }),
		"shutdown_timeout":        durationSetting(time.Second, func(c *Config) *time.Duration { return &c.ShutdownTimeout }),
		"dead_max_per_topic":      intSetting(func(c *Config) *int { return &c.DeadMaxPerTopic }),
		"dead_ttl":                durationSetting(time.Second, func(c *Config) *time.Duration { return &c.DeadTTL }),
		"log_level":               logLevelSetting,
		"log_format":              logFormatSetting,
		"auth_token":              stringSetting(func(c *Config) *string { return &c.AuthToken }),
		"metrics_auth":            boolSetting(func(c *Config) *bool { return &c.MetricsAuth }),
		"allowed_hosts":           listSetting(func(c *Config) *[]string { return &c.AllowedHosts }),
		"metrics_topic_labels":    intSetting(func(c *Config) *int { return &c.MetricsTopicLabels }),
		"max_held_pops":           intSetting(func(c *Config) *int { return &c.MaxHeldPops }),
		"debug_addr":              stringSetting(func(c *Config) *string { return &c.DebugAddr }),
		"callback_secret":         stringSetting(func(c *Config) *string { return &c.CallbackSecret }),
		"callback_allow":          listSetting(func(c *Config) *[]string { return &c.CallbackAllow }),
		"callback_concurrency":    intSetting(func(c *Config) *int { return &c.CallbackConcurrency }),
		"callback_per_host":       intSetting(func(c *Config) *int { return &c.CallbackPerHost }),
		"callback_shutdown_grace": durationSetting(time.Second, func(c *Config) *time.Duration { return &c.CallbackShutdownGrace }),

		"redis.host":            stringSetting(func(c *Config) *string { return &c.Redis.Host }),
		"redis.db":              intSetting(func(c *Config) *int { return &c.Redis.DB }),
		"redis.password":        stringSetting(func(c *Config) *string { return &c.Redis.Password }),
		"redis.max_idle":        intSetting(func(c *Config) *int { return &c.Redis.MaxIdle }),
		"redis.max_active":      intSetting(func(c *Config) *int { return &c.Redis.MaxActive }),
		"redis.connect_timeout": durationSetting(time.Millisecond, func(c *Config) *time.Duration { return &c.Redis.ConnectTimeout }),
		"redis.read_timeout":    durationSetting(time.Millisecond, func(c *Config) *time.Duration { return &c.Redis.ReadTimeout }),
		"redis.write_timeout":   durationSetting(time.Millisecond, func(c *Config) *time.Duration { return &c.Redis.WriteTimeout }),
		"redis.username":        stringSetting(func(c *Config) *string { return &c.Redis.Username }),
		"redis.tls":             boolSetting(func(c *Config) *bool { return &c.Redis.TLS }),
		"redis.tls_ca_file":     stringSetting(func(c *Config) *string { return &c.Redis.TLSCAFile }),
		"redis.tls_server_name": stringSetting(func(c *Config) *string { return &c.Redis.TLSServerName }),
		"redis.sentinel_addrs":  listSetting(func(c *Config) *[]string { return &c.Redis.SentinelAddrs }),
		"redis.master_name":     stringSetting(func(c *Config) *string { return &c.Redis.MasterName }),
		"redis.cluster_addrs":   listSetting(func(c *Config) *[]string { return &c.Redis.ClusterAddrs }),
		"redis.wait_replicas":   intSetting(func(c *Config) *int { return &c.Redis.WaitReplicas }),
		"redis.wait_timeout_ms": durationSetting(time.Millisecond, func(c *Config) *time.Duration { return &c.Redis.WaitTimeout }),
	}
}

func stringSetting(field func(*Config) *string) setter {
	return func(c *Config, raw string) (string, error) {
		*field(c) = raw
		return "", nil
	}
}

// emptyNumber is the warning for "key =" with no number: the original took
// its default there, and an old conf doing so should still start.
func emptyNumber(current string) string {
	return "empty value, using the default " + current
}

// parseInteger parses a whole number of at most bits bits, with an error
// that quotes the value.
func parseInteger(raw string, bits int) (int64, error) {
	n, err := strconv.ParseInt(raw, 10, bits)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return 0, fmt.Errorf("%q is out of range", raw)
		}
		return 0, fmt.Errorf("%q is not a whole number", raw)
	}
	return n, nil
}

func intSetting(field func(*Config) *int) setter {
	return func(c *Config, raw string) (string, error) {
		if raw == "" {
			return emptyNumber(strconv.Itoa(*field(c))), nil
		}
		n, err := parseInteger(raw, strconv.IntSize)
		if err != nil {
			return "", err
		}
		*field(c) = int(n)
		return "", nil
	}
}

func int64Setting(field func(*Config) *int64) setter {
	return func(c *Config, raw string) (string, error) {
		if raw == "" {
			return emptyNumber(strconv.FormatInt(*field(c), 10)), nil
		}
		n, err := parseInteger(raw, 64)
		if err != nil {
			return "", err
		}
		*field(c) = n
		return "", nil
	}
}

// durationSetting reads a whole number of units (time.Second or
// time.Millisecond), as the original's keys are written.
func durationSetting(unit time.Duration, field func(*Config) *time.Duration) setter {
	return func(c *Config, raw string) (string, error) {
		if raw == "" {
			return emptyNumber(strconv.FormatInt(int64(*field(c)/unit), 10)), nil
		}
		n, err := parseInteger(raw, 64)
		if err != nil {
			return "", err
		}
		if n > math.MaxInt64/int64(unit) || n < math.MinInt64/int64(unit) {
			return "", fmt.Errorf("%q is out of range", raw)
		}
		*field(c) = time.Duration(n) * unit
		return "", nil
	}
}

// listSetting reads a comma-separated list; spaces around items are
// dropped, and an empty value is an empty list.
func listSetting(field func(*Config) *[]string) setter {
	return func(c *Config, raw string) (string, error) {
		var items []string
		if raw != "" {
			for _, item := range strings.Split(raw, ",") {
				item = strings.TrimSpace(item)
				if item == "" {
					return "", fmt.Errorf("%q has an empty item", raw)
				}
				items = append(items, item)
			}
		}
		*field(c) = items
		return "", nil
	}
}

// boolSetting reads true or false (also yes/no, on/off, 1/0; any case).
func boolSetting(field func(*Config) *bool) setter {
	return func(c *Config, raw string) (string, error) {
		switch strings.ToLower(raw) {
		case "":
			return "empty value, using the default " + strconv.FormatBool(*field(c)), nil
		case "true", "yes", "on", "1":
			*field(c) = true
		case "false", "no", "off", "0":
			*field(c) = false
		default:
			return "", fmt.Errorf("%q is not true or false", raw)
		}
		return "", nil
	}
}

// bucketSizeSetting reads bucket_size. Left empty, it stays unset, as
// when the key is missing; 0 says the same.
func bucketSizeSetting(c *Config, raw string) (string, error) {
	if raw == "" {
		return "empty value: left unset (the partition count recorded in Redis, else the default)", nil
	}
	n, err := parseInteger(raw, strconv.IntSize)
	if err != nil {
		return "", err
	}
	c.BucketSize = int(n)
	return "", nil
}

func logLevelSetting(c *Config, raw string) (string, error) {
	level, err := ParseLogLevel(raw)
	if err != nil {
		return "", err
	}
	c.LogLevel = level
	return "", nil
}

func logFormatSetting(c *Config, raw string) (string, error) {
	c.LogFormat = strings.ToLower(raw)
	return "", nil
}
