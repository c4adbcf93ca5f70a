package main

import (
	"bufio"
	"cmp"
	"fmt"
	"slices"
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

// resetStats clears Redis' command statistics (CONFIG RESETSTAT), so that
// INFO commandstats afterwards covers one phase.
func (r *redisInspector) resetStats() error {
	if _, err := r.conn.Do("CONFIG", "RESETSTAT"); err != nil {
		return fmt.Errorf("CONFIG RESETSTAT: %w", err)
	}
	return nil
}

// commandStat is one line of INFO commandstats.
type commandStat struct {
	name  string
	calls int64
	usec  int64
}

// commandStats reads INFO commandstats, busiest command first.
func (r *redisInspector) commandStats() ([]commandStat, error) {
	info, err := redis.String(r.conn.Do("INFO", "commandstats"))
	if err != nil {
		return nil, fmt.Errorf("INFO commandstats: %w", err)
	}
	return parseCommandStats(info), nil
}

// parseCommandStats reads lines like
// "cmdstat_evalsha:calls=10,usec=55,usec_per_call=5.50,...".
func parseCommandStats(info string) []commandStat {
	var stats []commandStat
	for _, line := range strings.Split(info, "\n") {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		name, ok = strings.CutPrefix(name, "cmdstat_")
		if !ok {
			continue
		}
		stat := commandStat{name: name}
		for _, field := range strings.Split(fields, ",") {
			key, value, _ := strings.Cut(field, "=")
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				continue
			}
			switch key {
			case "calls":
				stat.calls = n
			case "usec":
				stat.usec = n
			}
		}
		stats = append(stats, stat)
	}
	slices.SortFunc(stats, func(a, b commandStat) int { return cmp.Compare(b.usec, a.usec) })
	return stats
}

// cpuSeconds is INFO cpu's used_cpu_user + used_cpu_sys of the Redis
// process.
func (r *redisInspector) cpuSeconds() (float64, error) {
	info, err := redis.String(r.conn.Do("INFO", "cpu"))
	if err != nil {
		return 0, fmt.Errorf("INFO cpu: %w", err)
	}
	var total float64
	for _, key := range []string{"used_cpu_user", "used_cpu_sys"} {
		value, ok := infoField(info, key)
		if !ok {
			return 0, fmt.Errorf("INFO cpu has no %s field", key)
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return 0, fmt.Errorf("INFO cpu: %s %q: %w", key, value, err)
		}
		total += v
	}
	return total, nil
}

// connectionsReceived is INFO stats' total_connections_received: how many
// connections Redis has accepted since it started.
func (r *redisInspector) connectionsReceived() (int64, error) {
	info, err := redis.String(r.conn.Do("INFO", "stats"))
	if err != nil {
		return 0, fmt.Errorf("INFO stats: %w", err)
	}
	value, ok := infoField(info, "total_connections_received")
	if !ok {
		return 0, fmt.Errorf("INFO stats has no total_connections_received field")
	}
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO stats: total_connections_received %q: %w", value, err)
	}
	return n, nil
}
