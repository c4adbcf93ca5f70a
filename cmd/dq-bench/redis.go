package main

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// benchClientName is set on the tool's own Redis connections so that they
// can be left out when counting the server's connections.
const benchClientName = "dq-bench"

// redisInspector reads and resets the Redis the server uses: FLUSHDB between
// phases, INFO memory, CLIENT LIST. It holds one connection.
type redisInspector struct {
	conn redis.Conn
}

func dialRedis(addr string, db int, password string) (*redisInspector, error) {
	opts := []redis.DialOption{
		redis.DialDatabase(db),
		redis.DialConnectTimeout(5 * time.Second),
		redis.DialReadTimeout(30 * time.Second),
		redis.DialWriteTimeout(5 * time.Second),
		redis.DialClientName(benchClientName),
	}
	if password != "" {
		opts = append(opts, redis.DialPassword(password))
	}
	conn, err := redis.Dial("tcp", addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to redis at %s: %w", addr, err)
	}
	return &redisInspector{conn: conn}, nil
}

func (r *redisInspector) close() error { return r.conn.Close() }

// flushDB empties the server's db, so that each phase starts clean.
func (r *redisInspector) flushDB() error {
	if _, err := r.conn.Do("FLUSHDB"); err != nil {
		return fmt.Errorf("FLUSHDB: %w", err)
	}
	return nil
}

// dbSize is the number of keys in the server's db.
func (r *redisInspector) dbSize() (int, error) {
	n, err := redis.Int(r.conn.Do("DBSIZE"))
	if err != nil {
		return 0, fmt.Errorf("DBSIZE: %w", err)
	}
	return n, nil
}

// usedMemory is INFO memory's used_memory, in bytes.
func (r *redisInspector) usedMemory() (int64, error) {
	info, err := redis.String(r.conn.Do("INFO", "memory"))
	if err != nil {
		return 0, fmt.Errorf("INFO memory: %w", err)
	}
	value, ok := infoField(info, "used_memory")
	if !ok {
		return 0, fmt.Errorf("INFO memory has no used_memory field")
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO memory: used_memory %q: %w", value, err)
	}
	return n, nil
}

// infoField finds "key:value" in the text INFO returns.
func infoField(info, key string) (string, bool) {
	scanner := bufio.NewScanner(strings.NewReader(info))
	for scanner.Scan() {
		line := strings.TrimSpace(scanner.Text())
		if k, v, ok := strings.Cut(line, ":"); ok && k == key {
			return v, true
		}
	}
	return "", false
}

// otherClients counts the normal client connections of CLIENT LIST that are
// not the tool's own (named benchClientName): with only the server and the
// tool talking to this Redis, that is the server's connections.
func (r *redisInspector) otherClients() (int, error) {
	list, err := redis.String(r.conn.Do("CLIENT", "LIST", "TYPE", "normal"))
	if err != nil {
		return 0, fmt.Errorf("CLIENT LIST: %w", err)
	}
	return countOtherClients(list), nil
}

// countOtherClients counts the lines of a CLIENT LIST answer whose name is
// not benchClientName.
func countOtherClients(list string) int {
	count := 0
	for _, line := range strings.Split(list, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		own := false
		for _, field := range strings.Fields(line) {
			if field == "name="+benchClientName {
				own = true
				break
			}
		}
		if !own {
			count++
		}
	}
	return count
}
