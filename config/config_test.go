package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaultMatchesTheOriginal(t *testing.T) {
	t.Parallel()
	got := Default()
	want := Config{
		BindAddress:           "0.0.0.0:9277",
		BucketSize:            0,
		BucketName:            "dq_bucket_%d",
		QueueName:             "dq_queue_%s",
		QueueBlockTimeout:     178 * time.Second,
		KeyPrefix:             "dq_",
		MaxBodyBytes:          16777216,
		MaxJobBodyBytes:       1048576,
		ReadHeaderTimeout:     10 * time.Second,
		ReadBodyTimeout:       120 * time.Second,
		WriteTimeout:          60 * time.Second,
		IdleTimeout:           240 * time.Second,
		HTTPFastPath:          true,
		ShutdownTimeout:       30 * time.Second,
		DeadMaxPerTopic:       10000,
		DeadTTL:               7 * 24 * time.Hour,
		LogLevel:              slog.LevelInfo,
		LogFormat:             "text",
		MetricsTopicLabels:    100,
		MaxHeldPops:           20000,
		CallbackConcurrency:   32,
		CallbackPerHost:       4,
		CallbackShutdownGrace: 10 * time.Second,
		Redis: Redis{
			Host:           "127.0.0.1:6379",
			DB:             1,
			Password:       "",
			MaxIdle:        10,
			MaxActive:      0,
			ConnectTimeout: 5 * time.Second,
			ReadTimeout:    180 * time.Second,
			WriteTimeout:   3 * time.Second,
			WaitTimeout:    time.Second,
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Default() =\n%+v\nwant\n%+v", got, want)
	}
	if err := got.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if got.Redis.Embedded() {
		t.Fatal("default redis.host reports embedded")
	}
}

// The original's files must load unchanged.
func TestLoadOriginalFiles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file         string
		change       func(*Config)
		wantWarnings []string
	}{
		{
			// v0.4's shipped file: every line commented out.
			file:   "original-v0.4.conf",
			change: func(*Config) {},
		},
		{
			// The same file with every line uncommented: inline "; ..."
			// comments must not leak into values.
			file:   "original-v0.4-uncommented.conf",
			change: func(c *Config) { c.BindAddress = "0.0.0.0:9278"; c.BucketSize = 3 },
		},
		{
			// An early version: quoted values and the bucket key that is gone.
			file:         "original-early.conf",
			change:       func(c *Config) { c.BindAddress = "0.0.0.0:5920" },
			wantWarnings: []string{"unknown key bucket ignored"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			path := filepath.Join("testdata", tt.file)
			got, warnings, err := Load(path)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			want := Default()
			tt.change(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load =\n%+v\nwant\n%+v", got, want)
			}
			var wantWarnings []string
			for _, w := range tt.wantWarnings {
				wantWarnings = append(wantWarnings, path+": "+w)
			}
			if !reflect.DeepEqual(warnings, wantWarnings) {
				t.Errorf("warnings = %q, want %q", warnings, wantWarnings)
			}
		})
	}
}

func TestParseValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		ini          string
		change       func(*Config)
		wantWarnings []string
	}{
		{
			name:   "empty file",
			ini:    "",
			change: func(*Config) {},
		},
		{
			name: "every original key in the root section",
			ini: `bind_address = 127.0.0.1:8000
bucket_size = 7
bucket_name = b_%d
queue_name = q_%s_ready
queue_block_timeout = 30
redis.host = 10.0.0.1:6380
redis.db = 4
redis.password = secret
redis.max_idle = 3
redis.max_active = 20
redis.connect_timeout = 250
redis.read_timeout = 31000
redis.write_timeout = 1500
`,
			change: func(c *Config) {
				c.BindAddress = "127.0.0.1:8000"
				c.BucketSize = 7
				c.BucketName = "b_%d"
				c.QueueName = "q_%s_ready"
				c.QueueBlockTimeout = 30 * time.Second
				c.Redis = Redis{
					Host: "10.0.0.1:6380", DB: 4, Password: "secret", MaxIdle: 3, MaxActive: 20,
					ConnectTimeout: 250 * time.Millisecond, ReadTimeout: 31 * time.Second, WriteTimeout: 1500 * time.Millisecond,
					WaitTimeout: time.Second,
				}
			},
		},
		{
			name: "redis section",
			ini: `bucket_size = 2
[redis]
host = 127.0.0.1:7000
db = 0
password = 'p w'
read_timeout = 200000
`,
			change: func(c *Config) {
				c.BucketSize = 2
				c.Redis.Host = "127.0.0.1:7000"
				c.Redis.DB = 0
				c.Redis.Password = "p w"
				c.Redis.ReadTimeout = 200 * time.Second
			},
		},
		{
			name: "new keys",
			ini: `key_prefix = app1_
max_body_bytes = 1000
max_job_body_bytes = 1000
read_header_timeout = 5
read_body_timeout = 30
write_timeout = 15
idle_timeout = 60
shutdown_timeout = 2
callback_shutdown_grace = 1
log_level = DEBUG
log_format = JSON
`,
			change: func(c *Config) {
				c.KeyPrefix = "app1_"
				c.MaxBodyBytes = 1000
				c.MaxJobBodyBytes = 1000
				c.ReadHeaderTimeout = 5 * time.Second
				c.ReadBodyTimeout = 30 * time.Second
				c.WriteTimeout = 15 * time.Second
				c.IdleTimeout = 60 * time.Second
				c.ShutdownTimeout = 2 * time.Second
				c.CallbackShutdownGrace = time.Second
				c.LogLevel = slog.LevelDebug
				c.LogFormat = LogFormatJSON
			},
		},
		{
			name: "operations keys",
			ini: `auth_token = 0123456789abcdef-token
metrics_auth = TRUE
metrics_topic_labels = 7
max_held_pops = 50
debug_addr = 127.0.0.1:6060
`,
			change: func(c *Config) {
				c.AuthToken = "0123456789abcdef-token"
				c.MetricsAuth = true
				c.MetricsTopicLabels = 7
				c.MaxHeldPops = 50
				c.DebugAddr = "127.0.0.1:6060"
			},
		},
		{
			name: "allowed_hosts",
			ini:  "allowed_hosts = dq.example, Dash.Example.COM ,xn--bcher-kva.example.,queue_1.internal",
			change: func(c *Config) {
				c.AllowedHosts = []string{"dq.example", "Dash.Example.COM", "xn--bcher-kva.example.", "queue_1.internal"}
			},
		},
		{
			name:   "boolean spellings",
			ini:    "auth_token = 0123456789abcdef\nmetrics_auth = yes",
			change: func(c *Config) { c.AuthToken = "0123456789abcdef"; c.MetricsAuth = true },
		},
		{
			name:         "empty boolean keeps its default with a warning",
			ini:          "metrics_auth =",
			change:       func(*Config) {},
			wantWarnings: []string{"metrics_auth: empty value, using the default false"},
		},
		{
			name:   "fast path off",
			ini:    "http_fast_path = false",
			change: func(c *Config) { c.HTTPFastPath = false },
		},
		{
			name:   "fast path off, spelled off",
			ini:    "http_fast_path = Off",
			change: func(c *Config) { c.HTTPFastPath = false },
		},
		{
			name:   "fast path on, as by default",
			ini:    "http_fast_path = true",
			change: func(*Config) {},
		},
		{
			name:         "empty fast path keeps it on with a warning",
			ini:          "http_fast_path =",
			change:       func(*Config) {},
			wantWarnings: []string{"http_fast_path: empty value, using the default true"},
		},
		{
			name: "quotes and comments",
			ini: `bind_address = "127.0.0.1:9000" ; quoted
redis.password = "a;b#c"
key_prefix = 'x_' # hash comment
bucket_size = +4
`,
			change: func(c *Config) {
				c.BindAddress = "127.0.0.1:9000"
				c.Redis.Password = "a;b#c"
				c.KeyPrefix = "x_"
				c.BucketSize = 4
			},
		},
		{
			name: "empty quoted password",
			ini:  `redis.password = ""`,
			change: func(c *Config) {
				c.Redis.Password = ""
			},
		},
		{
			name:   "embedded redis",
			ini:    `redis.host = embedded`,
			change: func(c *Config) { c.Redis.Host = EmbeddedHost },
		},
		{
			name:   "empty numbers keep their defaults with a warning",
			ini:    "bucket_size =\nredis.read_timeout = ; ms\nqueue_block_timeout = \"\"\nmax_body_bytes =",
			change: func(*Config) {},
			wantWarnings: []string{
				"bucket_size: empty value: left unset (the partition count recorded in Redis, else the default)",
				"redis.read_timeout: empty value, using the default 180000",
				"queue_block_timeout: empty value, using the default 178",
				"max_body_bytes: empty value, using the default 16777216",
			},
		},
		{
			name: "unknown keys and sections warn",
			ini: `bucket = 5
redis.pool = 3
[http]
port = 80
[redis]
cluster = yes
`,
			change: func(*Config) {},
			wantWarnings: []string{
				"unknown key bucket ignored",
				"unknown key redis.pool ignored",
				"unknown key [http] port ignored",
				"unknown key [redis] cluster ignored",
			},
		},
		{
			name:         "last of a repeated key wins, with a warning",
			ini:          "bucket_size = 4\nbucket_size = 5\n",
			change:       func(c *Config) { c.BucketSize = 5 },
			wantWarnings: []string{"bucket_size is given 2 times: the last value is used"},
		},
		{
			// The README's webhook walkthrough once said to add keys the
			// shipped conf has, empty, further down.
			name:         "a key set at the top and left empty below is empty",
			ini:          "callback_allow = 127.0.0.1\nbind_address = 127.0.0.1:9277\ncallback_allow =\n",
			change:       func(c *Config) { c.BindAddress = "127.0.0.1:9277" },
			wantWarnings: []string{"callback_allow is given 2 times: the last value is used"},
		},
		{
			name:         "a repeat of the same value warns too",
			ini:          "dead_ttl = 60\ndead_ttl = 60\ndead_ttl = 60\n",
			change:       func(c *Config) { c.DeadTTL = time.Minute },
			wantWarnings: []string{"dead_ttl is given 3 times: the last value is used"},
		},
		{
			name:         "a repeat in a section, the section given twice",
			ini:          "[redis]\ndb = 2\n[redis]\ndb = 3\n",
			change:       func(c *Config) { c.Redis.DB = 3 },
			wantWarnings: []string{"[redis] db is given 2 times: the last value is used"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkParse(t, tt.ini, tt.change, tt.wantWarnings) })
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ini  string
		// want are substrings of the error: the key and what is wrong.
		want []string
	}{
		{"word for a number", "bucket_size = three", []string{"bucket_size", `"three" is not a whole number`}},
		{"fraction", "queue_block_timeout = 1.5", []string{"queue_block_timeout", `"1.5" is not a whole number`}},
		{"number with unit", "redis.read_timeout = 180s", []string{"redis.read_timeout", `"180s"`}},
		{"hex", "redis.db = 0x1", []string{"redis.db", `"0x1"`}},
		{"number in section", "[redis]\nmax_idle = lots", []string{"redis.max_idle", `"lots"`}},
		{"int overflow", "max_body_bytes = 99999999999999999999", []string{"max_body_bytes", "out of range"}},
		{"duration overflow", "queue_block_timeout = 9223372036854775807", []string{"queue_block_timeout", "out of range"}},
		{"bucket_size negative", "bucket_size = -2", []string{"bucket_size = -2"}},
		{"bucket_size huge", "bucket_size = 5000", []string{"bucket_size = 5000"}},
		{"bucket_name without %d", "bucket_name = dq_bucket", []string{"bucket_name", "%d exactly once"}},
		{"bucket_name with %s", "bucket_name = dq_bucket_%s", []string{"bucket_name", "one %d"}},
		{"bucket_name with two %d", "bucket_name = b_%d_%d", []string{"bucket_name", "%d exactly once"}},
		{"bucket_name with extra verb", "bucket_name = b_%d_%v", []string{"bucket_name", "the only % allowed"}},
		{"bucket_name with %%", "bucket_name = b%%_%d", []string{"bucket_name", "the only % allowed"}},
		{"bucket_name with padded verb", "bucket_name = b_%03d", []string{"bucket_name"}},
		{"bucket_name trailing %", "bucket_name = b_%d%", []string{"bucket_name"}},
		{"empty bucket_name", "bucket_name =", []string{"bucket_name", "%d exactly once"}},
		{"queue_name without %s", "queue_name = dq_queue", []string{"queue_name", "%s exactly once"}},
		{"queue_name with %d", "queue_name = dq_queue_%d", []string{"queue_name"}},
		{"queue_name with two %s", "queue_name = q_%s_%s", []string{"queue_name", "%s exactly once"}},
		{"templates that collide", "bucket_name = dq_%d\nqueue_name = dq_%s", []string{"bucket_name", "queue_name", "share a key"}},
		{"block timeout equal to read timeout", "queue_block_timeout = 180",
			[]string{"queue_block_timeout = 180 (seconds)", "redis.read_timeout = 180000 (milliseconds)"}},
		{"read timeout below block timeout", "redis.read_timeout = 100000",
			[]string{"queue_block_timeout = 178", "redis.read_timeout = 100000"}},
		{"block timeout in ms by mistake", "queue_block_timeout = 178000", []string{"queue_block_timeout = 178000"}},
		{"block timeout zero", "queue_block_timeout = 0", []string{"queue_block_timeout = 0", "at least 1"}},
		{"block timeout negative", "queue_block_timeout = -1", []string{"queue_block_timeout = -1"}},
		{"negative connect timeout", "redis.connect_timeout = -5", []string{"redis.connect_timeout = -5", "negative"}},
		{"negative write timeout", "redis.write_timeout = -1", []string{"redis.write_timeout = -1"}},
		{"negative db", "redis.db = -1", []string{"redis.db = -1"}},
		{"negative max_idle", "redis.max_idle = -1", []string{"redis.max_idle = -1"}},
		{"negative max_active", "redis.max_active = -1", []string{"redis.max_active = -1"}},
		{"empty bind address", "bind_address =", []string{"bind_address", "empty"}},
		{"empty quoted bind address", `bind_address = ""`, []string{"bind_address", "empty"}},
		{"bind address without port", "bind_address = 0.0.0.0", []string{"bind_address", "host:port"}},
		{"bind address bad port", "bind_address = 0.0.0.0:http", []string{"bind_address", "port"}},
		{"bind address port too big", "bind_address = 0.0.0.0:70000", []string{"bind_address", "port"}},
		{"empty redis host", "redis.host =", []string{"redis.host", "empty"}},
		{"redis host without port", "redis.host = 127.0.0.1", []string{"redis.host", "host:port"}},
		{"redis port zero", "redis.host = 127.0.0.1:0", []string{"redis.host", "port"}},
		{"empty key prefix", "key_prefix =", []string{"key_prefix is empty"}},
		{"allowed_hosts with a port", "allowed_hosts = dq.example:9277", []string{`allowed_hosts: "dq.example:9277" is not a host name`, "without scheme, port or wildcard"}},
		{"allowed_hosts with a scheme", "allowed_hosts = a.example, http://dq.example", []string{`allowed_hosts: "http://dq.example" is not a host name`}},
		{"allowed_hosts with a wildcard", "allowed_hosts = *.example", []string{`allowed_hosts: "*.example" is not a host name`}},
		{"allowed_hosts with an IPv6 address", "allowed_hosts = [::1]", []string{`allowed_hosts: "[::1]" is not a host name`, "IP addresses and localhost need no entry"}},
		{"allowed_hosts with an empty label", "allowed_hosts = dq..example", []string{`allowed_hosts: "dq..example" is not a host name`}},
		{"allowed_hosts with a unicode name", "allowed_hosts = bücher.example", []string{`allowed_hosts: "bücher.example" is not a host name`}},
		{"allowed_hosts with an empty item", "allowed_hosts = a.example,,b.example", []string{"allowed_hosts", "empty item"}},
		{"zero max body", "max_body_bytes = 0", []string{"max_body_bytes = 0"}},
		{"zero max job body", "max_job_body_bytes = 0", []string{"max_job_body_bytes = 0"}},
		{"job body above redis limit", "max_body_bytes = 9999999999\nmax_job_body_bytes = 9999999999",
			[]string{"max_job_body_bytes = 9999999999"}},
		{"zero read header timeout", "read_header_timeout = 0", []string{"read_header_timeout = 0"}},
		{"zero read body timeout", "read_body_timeout = 0", []string{"read_body_timeout = 0"}},
		{"zero write timeout", "write_timeout = 0", []string{"write_timeout = 0"}},
		{"zero idle timeout", "idle_timeout = 0", []string{"idle_timeout = 0"}},
		{"negative shutdown timeout", "shutdown_timeout = -3", []string{"shutdown_timeout = -3"}},
		{"bad log level", "log_level = loud", []string{"log_level", `"loud"`}},
		{"empty log level", "log_level =", []string{"log_level"}},
		{"bad log format", "log_format = xml", []string{"log_format", `"xml"`}},
		{"auth token with a space", "auth_token = 'abcdefgh ijklmnopq'", []string{"auth_token", "without spaces"}},
		{"auth token with non-ASCII", "auth_token = abcdefghijklmnopé", []string{"auth_token", "printable ASCII"}},
		{"metrics auth without a token", "metrics_auth = true", []string{"metrics_auth = true needs auth_token"}},
		{"metrics auth not a boolean", "metrics_auth = maybe", []string{"metrics_auth", `"maybe" is not true or false`}},
		{"fast path not a boolean", "http_fast_path = fast", []string{"http_fast_path", `"fast" is not true or false`}},
		{"zero topic labels", "metrics_topic_labels = 0", []string{"metrics_topic_labels = 0", "at least 1"}},
		{"zero held pops", "max_held_pops = 0", []string{"max_held_pops = 0", "at least 1"}},
		{"negative held pops", "max_held_pops = -5", []string{"max_held_pops = -5"}},
		{"zero callback concurrency", "callback_concurrency = 0", []string{"callback_concurrency = 0", "at least 1"}},
		{"zero per host", "callback_per_host = 0", []string{"callback_per_host = 0", "at least 1"}},
		{"negative read timeout", "redis.read_timeout = -1", []string{"redis.read_timeout = -1"}},
		{"empty allow item", "callback_allow = 10.0.0.0/8,,x", []string{"callback_allow"}},
		{"no dead letters kept", "dead_max_per_topic = 0", []string{"dead_max_per_topic = 0"}},
		{"debug address without port", "debug_addr = localhost", []string{"debug_addr", "host:port"}},
		{"debug address equal to bind address", "bind_address = 127.0.0.1:9000\ndebug_addr = 127.0.0.1:9000",
			[]string{"debug_addr", "differ from bind_address"}},
		{"key in both spellings", "redis.host = 127.0.0.1:1\n[redis]\nhost = 127.0.0.1:2",
			[]string{"redis.host is set twice", "[redis] host"}},
		{"several problems at once", "bucket_size = -1\nlog_format = xml", []string{"bucket_size = -1", "log_format"}},
		{"not ini", "[redis", []string{"parse ini"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := Parse([]byte(tt.ini))
			if err == nil {
				t.Fatalf("Parse succeeded with %+v, want an error containing %q", cfg, tt.want)
			}
			msg := err.Error()
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q does not contain %q", msg, w)
				}
			}
			if strings.ContainsAny(msg, "\r\n") {
				t.Errorf("error %q spans several lines, want one", msg)
			}
		})
	}
}

func TestValidateCatchesChangesAfterLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"embedded host is valid", func(c *Config) { c.Redis.Host = EmbeddedHost }, ""},
		{"ipv6 bind", func(c *Config) { c.BindAddress = "[::1]:0" }, ""},
		{"port zero bind picks a free port", func(c *Config) { c.BindAddress = "127.0.0.1:0" }, ""},
		{"all interfaces without host", func(c *Config) { c.BindAddress = ":9277" }, ""},
		{"sub-second block timeout", func(c *Config) { c.QueueBlockTimeout = 500 * time.Millisecond }, "queue_block_timeout = 0.5"},
		{"read timeout just above block timeout", func(c *Config) { c.Redis.ReadTimeout = 178001 * time.Millisecond }, ""},
		{"unknown log format", func(c *Config) { c.LogFormat = "" }, "log_format"},
		{"debug and bind addresses both on port 0", func(c *Config) {
			c.BindAddress, c.DebugAddr = "127.0.0.1:0", "127.0.0.1:0"
		}, ""},
		{"metrics_auth with the token from the environment", func(c *Config) {
			c.MetricsAuth = true
			c.ApplyEnv(func(string) (string, bool) { return "env-token-0123456789", true })
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			tt.change(&cfg)
			err := cfg.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// The token is a secret: an error about it never shows it.
func TestAuthTokenErrorHidesTheToken(t *testing.T) {
	t.Parallel()
	for _, token := range []string{"has space secret-secret", "tab\tsecret-secret-secret", "non-ascii-secret-é-secret"} {
		cfg := Default()
		cfg.AuthToken = token
		err := cfg.Validate()
		if err == nil {
			t.Fatalf("Validate accepted auth token %q", token)
		}
		if strings.Contains(err.Error(), token) || strings.Contains(err.Error(), "secret") {
			t.Errorf("error %q shows the token", err)
		}
	}
}

func TestApplyEnv(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		fileToken   string
		env         map[string]string
		wantToken   string
		wantApplied []string
	}{
		{"no variable keeps the file's token", "file-token-0123456789", nil, "file-token-0123456789", nil},
		{"variable wins over the file", "file-token-0123456789", map[string]string{AuthTokenEnv: "env-token-0123456789"},
			"env-token-0123456789", []string{AuthTokenEnv}},
		{"variable without a file token", "", map[string]string{AuthTokenEnv: "env-token-0123456789"},
			"env-token-0123456789", []string{AuthTokenEnv}},
		{"empty variable does not turn auth off", "file-token-0123456789", map[string]string{AuthTokenEnv: ""},
			"file-token-0123456789", nil},
		{"other variables are ignored", "", map[string]string{"DQ_OTHER": "x"}, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			cfg.AuthToken = tt.fileToken
			applied := cfg.ApplyEnv(func(name string) (string, bool) {
				v, ok := tt.env[name]
				return v, ok
			})
			if cfg.AuthToken != tt.wantToken {
				t.Errorf("AuthToken = %q, want %q", cfg.AuthToken, tt.wantToken)
			}
			if !reflect.DeepEqual(applied, tt.wantApplied) {
				t.Errorf("applied = %q, want %q", applied, tt.wantApplied)
			}
		})
	}
}

func TestLoadNamesTheFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.conf")
	if _, _, err := Load(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Load(missing) error = %v, want one naming %s", err, missing)
	}

	bad := filepath.Join(dir, "bad.conf")
	if err := os.WriteFile(bad, []byte("bucket = 5\nbucket_size = x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, warnings, err := Load(bad)
	if err == nil || !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), "bucket_size") {
		t.Errorf("Load(bad) error = %v, want one naming %s and bucket_size", err, bad)
	}
	if want := []string{bad + ": unknown key bucket ignored"}; !reflect.DeepEqual(warnings, want) {
		t.Errorf("warnings = %q, want %q", warnings, want)
	}
}

func TestParseLogLevel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    slog.Level
		wantErr bool
	}{
		{"debug", slog.LevelDebug, false},
		{"info", slog.LevelInfo, false},
		{"Info", slog.LevelInfo, false},
		{"warn", slog.LevelWarn, false},
		{"warning", slog.LevelWarn, false},
		{"ERROR", slog.LevelError, false},
		{"", 0, true},
		{"trace", 0, true},
		{"-4", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseLogLevel(tt.in)
		if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
			t.Errorf("ParseLogLevel(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// The shipped delay-queue.conf documents every key with its default; only
// bind_address differs, on purpose (loopback, see the file).
func TestShippedConfDocumentsEveryKey(t *testing.T) {
	t.Parallel()
	path := filepath.Join("..", "delay-queue.conf")
	got, warnings, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("warnings = %q, want none", warnings)
	}
	want := Default()
	want.BindAddress = "127.0.0.1:9277"
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load =\n%+v\nwant the defaults with bind_address 127.0.0.1:9277:\n%+v", got, want)
	}
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for key := range settingSetters() {
		line := "\n" + key + " ="
		if key == "bucket_size" {
			// Left unset on purpose: the count recorded in Redis wins.
			line = "\n; " + key + " ="
		}
		i := strings.Index(string(text), line)
		if i < 0 {
			t.Errorf("%s has no line %q", path, strings.TrimSpace(line))
			continue
		}
		if !strings.HasPrefix(lastLine(string(text[:i])), ";") {
			t.Errorf("%s: %s has no comment line above it", path, key)
		}
	}
}

// lastLine returns the last line of s.
func lastLine(s string) string {
	return s[strings.LastIndex(s, "\n")+1:]
}

func TestRedisConnectivitySettings(t *testing.T) {
	t.Parallel()
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, []byte("-----BEGIN CERTIFICATE-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name         string
		ini          string
		change       func(*Config)
		wantWarnings []string
	}{
		{
			name: "acl user and tls",
			ini: "redis.username = dq\nredis.password = s3cret\nredis.tls = true\n" +
				"redis.tls_ca_file = " + caFile + "\nredis.tls_server_name = redis.internal\n",
			change: func(c *Config) {
				c.Redis.Username, c.Redis.Password = "dq", "s3cret"
				c.Redis.TLS, c.Redis.TLSCAFile, c.Redis.TLSServerName = true, caFile, "redis.internal"
			},
		},
		{
			name:   "tls with the system roots",
			ini:    "redis.tls = yes",
			change: func(c *Config) { c.Redis.TLS = true },
		},
		{
			name: "sentinel in the redis section, spaces around items",
			ini:  "[redis]\nsentinel_addrs = 10.0.0.1:26379 , 10.0.0.2:26379,[::1]:26379\nmaster_name = mymaster\n",
			change: func(c *Config) {
				c.Redis.SentinelAddrs = []string{"10.0.0.1:26379", "10.0.0.2:26379", "[::1]:26379"}
				c.Redis.MasterName = "mymaster"
			},
		},
		{
			name: "sentinel makes redis.host unused",
			ini:  "redis.host = 10.0.0.9:6379\nredis.sentinel_addrs = 10.0.0.1:26379\nredis.master_name = m\n",
			change: func(c *Config) {
				c.Redis.Host = "10.0.0.9:6379"
				c.Redis.SentinelAddrs = []string{"10.0.0.1:26379"}
				c.Redis.MasterName = "m"
			},
			wantWarnings: []string{"redis.host is ignored: the primary is the one redis.sentinel_addrs name"},
		},
		{
			name: "sentinel with an empty host",
			ini:  "redis.host =\nredis.sentinel_addrs = 10.0.0.1:26379\nredis.master_name = m\n",
			change: func(c *Config) {
				c.Redis.Host = ""
				c.Redis.SentinelAddrs = []string{"10.0.0.1:26379"}
				c.Redis.MasterName = "m"
			},
			wantWarnings: []string{"redis.host is ignored: the primary is the one redis.sentinel_addrs name"},
		},
		{
			name:   "empty sentinel list",
			ini:    "redis.sentinel_addrs =\nredis.master_name =\n",
			change: func(*Config) {},
		},
		{
			name: "wait for replicas",
			ini:  "redis.wait_replicas = 2\nredis.wait_timeout_ms = 250\n",
			change: func(c *Config) {
				c.Redis.WaitReplicas = 2
				c.Redis.WaitTimeout = 250 * time.Millisecond
			},
		},
		{
			name:   "wait timeout unused without replicas",
			ini:    "redis.wait_timeout_ms = 0",
			change: func(c *Config) { c.Redis.WaitTimeout = 0 },
		},
		{
			name:         "empty bool keeps its default",
			ini:          "redis.tls =",
			change:       func(*Config) {},
			wantWarnings: []string{"redis.tls: empty value, using the default false"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { checkParse(t, tt.ini, tt.change, tt.wantWarnings) })
	}
}

func TestRedisConnectivityErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missingCA := filepath.Join(dir, "missing.pem")
	tests := []struct {
		name string
		ini  string
		want []string // substrings of the error
	}{
		{"username without password", "redis.username = dq", []string{"redis.username", "redis.password"}},
		{"bad bool", "redis.tls = maybe", []string{"redis.tls", `"maybe" is not true or false`}},
		{"ca file without tls", "redis.tls_ca_file = " + dir, []string{"redis.tls_ca_file", "redis.tls is false"}},
		{"server name without tls", "redis.tls_server_name = r", []string{"redis.tls_server_name", "redis.tls is false"}},
		{"unreadable ca file", "redis.tls = true\nredis.tls_ca_file = " + missingCA, []string{"redis.tls_ca_file", missingCA}},
		{"directory as ca file", "redis.tls = true\nredis.tls_ca_file = " + dir, []string{"redis.tls_ca_file", "directory"}},
		{"sentinels without master name", "redis.sentinel_addrs = 10.0.0.1:26379", []string{"redis.master_name must name"}},
		{"master name without sentinels", "redis.master_name = m", []string{"redis.master_name", "needs redis.sentinel_addrs"}},
		{"sentinel without port", "redis.sentinel_addrs = 10.0.0.1\nredis.master_name = m", []string{"redis.sentinel_addrs", `"10.0.0.1"`, "host:port"}},
		{"sentinel port zero", "redis.sentinel_addrs = 10.0.0.1:0\nredis.master_name = m", []string{"redis.sentinel_addrs", "port"}},
		{"empty sentinel item", "redis.sentinel_addrs = 10.0.0.1:26379,,10.0.0.2:26379\nredis.master_name = m", []string{"redis.sentinel_addrs", "empty item"}},
		{"negative wait replicas", "redis.wait_replicas = -1", []string{"redis.wait_replicas = -1"}},
		{"wait replicas not a number", "redis.wait_replicas = all", []string{"redis.wait_replicas", `"all"`}},
		{"zero wait timeout with replicas", "redis.wait_replicas = 1\nredis.wait_timeout_ms = 0", []string{"redis.wait_timeout_ms = 0", "at least 1"}},
		{"negative wait timeout", "redis.wait_timeout_ms = -5", []string{"redis.wait_timeout_ms = -5"}},
		{"wait timeout above read timeout", "redis.wait_replicas = 1\nredis.wait_timeout_ms = 180000",
			[]string{"redis.wait_timeout_ms = 180000", "redis.read_timeout = 180000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, _, err := Parse([]byte(tt.ini))
			if err == nil {
				t.Fatalf("Parse succeeded with %+v, want an error containing %q", cfg.Redis, tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// -embedded sets redis.host after the file is read; the settings meant for
// a remote Redis must not stop it.
func TestEmbeddedIgnoresRemoteSettings(t *testing.T) {
	t.Parallel()
	cfg := Default()
	cfg.Redis.SentinelAddrs = []string{"10.0.0.1:26379"}
	cfg.Redis.MasterName = "m"
	cfg.Redis.TLS = true
	cfg.Redis.Host = EmbeddedHost
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() = %v, want nil", err)
	}
}

// Lowering one key alone never stops a start: related limits are capped
// where they are used.
func TestLimitsCappedByRelatedKeys(t *testing.T) {
	t.Parallel()
	cfg, _, err := Parse([]byte("max_body_bytes = 1024\nshutdown_timeout = 4\ncallback_concurrency = 2\n"))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := cfg.JobBodyLimit(); got != 1024 {
		t.Errorf("JobBodyLimit() = %d, want max_body_bytes (1024)", got)
	}
	perHost, grace := cfg.CallbackLimits()
	if perHost != 2 || grace != 2*time.Second {
		t.Errorf("CallbackLimits() = %d, %v; want 2 (callback_concurrency), 2s (half of shutdown_timeout)", perHost, grace)
	}
	if got, _ := Default().CallbackLimits(); got != 4 {
		t.Errorf("default per host = %d, want 4", got)
	}
}

// redis.read_timeout = 0 means no timeout: no held pop can hit it.
func TestNoReadTimeoutIsValid(t *testing.T) {
	t.Parallel()
	if _, _, err := Parse([]byte("redis.read_timeout = 0\n")); err != nil {
		t.Fatalf("Parse: %v", err)
	}
}

// checkParse parses ini and wants the defaults as changed by change, with
// wantWarnings.
func checkParse(t *testing.T, ini string, change func(*Config), wantWarnings []string) {
	t.Helper()
	got, warnings, err := Parse([]byte(ini))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Default()
	change(&want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
	}
	if !reflect.DeepEqual(warnings, wantWarnings) {
		t.Errorf("warnings = %q, want %q", warnings, wantWarnings)
	}
}
