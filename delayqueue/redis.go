package delayqueue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// MinRedisVersion is the oldest Redis the engine runs on.
const MinRedisVersion = "6.2.0"

// RedisOptions says how to reach Redis.
type RedisOptions struct {
	Addr           string
	DB             int
	Password       string
	MaxIdle        int
	MaxActive      int // 0 picks DefaultMaxActive: the engine never holds a connection per waiter
	ConnectTimeout time.Duration
	ReadTimeout    time.Duration
	WriteTimeout   time.Duration
}

// DefaultMaxActive bounds the command pool when the configuration leaves
// redis.max_active at 0.
const DefaultMaxActive = 48

// Dial opens one connection with the options' address, credentials and
// timeouts.
func (o RedisOptions) Dial() (redis.Conn, error) {
	opts := []redis.DialOption{
		redis.DialConnectTimeout(o.ConnectTimeout),
		redis.DialReadTimeout(o.ReadTimeout),
		redis.DialWriteTimeout(o.WriteTimeout),
		redis.DialDatabase(o.DB),
	}
	if o.Password != "" {
		opts = append(opts, redis.DialPassword(o.Password))
	}
	c, err := redis.Dial("tcp", o.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to redis at %s: %w", o.Addr, err)
	}
	return c, nil
}

// NewPool returns a connection pool for short commands and scripts.
func NewPool(o RedisOptions) *redis.Pool {
	maxActive := o.MaxActive
	if maxActive <= 0 {
		maxActive = DefaultMaxActive
	}
	maxIdle := o.MaxIdle
	if maxIdle > maxActive {
		maxIdle = maxActive
	}
	return &redis.Pool{
		MaxIdle:     maxIdle,
		MaxActive:   maxActive,
		Wait:        true,
		IdleTimeout: 240 * time.Second,
		Dial:        o.Dial,
		TestOnBorrow: func(c redis.Conn, t time.Time) error {
			if time.Since(t) < 30*time.Second {
				return nil
			}
			_, err := c.Do("PING")
			return err
		},
	}
}

// CheckServer verifies that Redis answers and is new enough.
func CheckServer(ctx context.Context, pool *redis.Pool) error {
	c, err := pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer c.Close()
	info, err := redis.String(redis.DoWithTimeout(c, 5*time.Second, "INFO", "server"))
	if err != nil {
		return fmt.Errorf("%w: INFO server: %w", ErrUnavailable, err)
	}
	version := infoField(info, "redis_version")
	if version == "" {
		return fmt.Errorf("redis did not report redis_version in INFO server")
	}
	if compareVersions(version, MinRedisVersion) < 0 {
		return fmt.Errorf("redis %s is too old: delay-queue needs Redis %s or newer", version, MinRedisVersion)
	}
	return nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// compareVersions compares dotted numeric versions: -1, 0 or 1.
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) || i < len(bs); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		switch {
		case x < y:
			return -1
		case x > y:
			return 1
		}
	}
	return 0
}
