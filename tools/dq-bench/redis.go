package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redisconn"
)

// benchClientName is set on the tool's own Redis connections so that they
// can be left out when counting the server's connections.
const benchClientName = "dq-bench"

// redisInspector reads and resets the Redis the server uses: FLUSHDB between
// phases, INFO memory and cpu, CLIENT LIST. On a standalone Redis it holds
// one connection; on a cluster, one to every primary, and each figure is
// taken on every primary (summed, or per primary where a share is asked).
type redisInspector struct {
	nodes   []redisNode // the primaries, sorted by address
	cluster bool
	// layout is the server's layout record (HGETALL of layoutKey) as it
	// was before the first flush, restored after every flush: FLUSHDB
	// would otherwise take it from under the running server. Empty for a
	// server that keeps none (this server before partitions).
	layoutKey  string
	layout     []string // field, value, field, value...
	layoutNode int      // the index in nodes of the node holding layoutKey
}

// redisNode is one Redis process the inspector reads: the server itself,
// or one primary of a cluster.
type redisNode struct {
	addr string
	conn redis.Conn
}

// dialRedis connects to the Redis at addr. When it is a cluster node, it
// reads the slot map from it and connects to every primary instead (db
// must be 0 there). keyPrefix is the server's key_prefix, which names its
// layout record (see readLayout).
func dialRedis(addr string, db int, password, keyPrefix string) (*redisInspector, error) {
	seed, err := dialNode(addr, db, password)
	if err != nil {
		return nil, err
	}
	info, err := redis.String(seed.Do("INFO", "cluster"))
	if err != nil {
		_ = seed.Close()
		return nil, fmt.Errorf("INFO cluster at %s: %w", addr, err)
	}
	r := &redisInspector{layoutKey: keyPrefix + "layout"}
	if enabled, _ := infoField(info, "cluster_enabled"); enabled != "1" {
		r.nodes = []redisNode{{addr: addr, conn: seed}}
	} else {
		r.cluster = true
		_ = seed.Close()
		primaries, err := clusterPrimaries(addr, password)
		if err != nil {
			return nil, fmt.Errorf("redis cluster at %s: %w", addr, err)
		}
		if db != 0 {
			return nil, fmt.Errorf("redis at %s is a cluster node: -redis-db must be 0, not %d", addr, db)
		}
		for _, p := range primaries {
			conn, err := dialNode(p, 0, password)
			if err != nil {
				_ = r.close()
				return nil, err
			}
			r.nodes = append(r.nodes, redisNode{addr: p, conn: conn})
		}
	}
	return r, nil
}

func dialNode(addr string, db int, password string) (redis.Conn, error) {
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
	return conn, nil
}

// clusterPrimaries returns the primaries serving slots, sorted, from the
// slot map of the cluster that the node at seed belongs to, as the server
// reads it.
func clusterPrimaries(seed, password string) ([]string, error) {
	c, err := redisconn.New(redisconn.Options{ClusterAddrs: []string{seed}, Password: password,
		ConnectTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, WriteTimeout: 5 * time.Second}, nil, nil)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.Primaries(ctx)
}

func (r *redisInspector) close() error {
	var errs []error
	for _, n := range r.nodes {
		errs = append(errs, n.conn.Close())
	}
	return errors.Join(errs...)
}

// addrs lists the primaries, in the order of every per-primary figure.
func (r *redisInspector) addrs() []string {
	addrs := make([]string, len(r.nodes))
	for i, n := range r.nodes {
		addrs[i] = n.addr
	}
	return addrs
}

// readLayout finds the server's layout record, for flushDB to restore. On
// a cluster only the primary serving its slot answers; the others answer
// MOVED.
func (r *redisInspector) readLayout() error {
	var errs []error
	for i, n := range r.nodes {
		fields, err := redis.Strings(n.conn.Do("HGETALL", r.layoutKey))
		if err != nil {
			errs = append(errs, fmt.Errorf("HGETALL %s at %s: %w", r.layoutKey, n.addr, err))
			continue
		}
		r.layout, r.layoutNode = fields, i
		return nil
	}
	return errors.Join(errs...)
}

// partitions is the partition count the server recorded, or 0 when it
// recorded none.
func (r *redisInspector) partitions() int {
	for i := 0; i+1 < len(r.layout); i += 2 {
		if r.layout[i] == "partitions" {
			n, _ := strconv.Atoi(r.layout[i+1])
			return n
		}
	}
	return 0
}

// flushDB empties the server's db on every primary, so that each phase
// starts clean, and puts the layout record back.
func (r *redisInspector) flushDB() error {
	for _, n := range r.nodes {
		if _, err := n.conn.Do("FLUSHDB"); err != nil {
			return fmt.Errorf("FLUSHDB at %s: %w", n.addr, err)
		}
	}
	if len(r.layout) == 0 {
		return nil
	}
	args := redis.Args{}.Add(r.layoutKey).AddFlat(r.layout)
	if _, err := r.nodes[r.layoutNode].conn.Do("HSET", args...); err != nil {
		return fmt.Errorf("restore %s: %w", r.layoutKey, err)
	}
	return nil
}

// dbSize is the number of keys in the server's db, over every primary.
func (r *redisInspector) dbSize() (int, error) {
	total := 0
	for _, n := range r.nodes {
		k, err := redis.Int(n.conn.Do("DBSIZE"))
		if err != nil {
			return 0, fmt.Errorf("DBSIZE at %s: %w", n.addr, err)
		}
		total += k
	}
	return total, nil
}

// infoInt reads an integer field of an INFO section of every primary.
func (r *redisInspector) infoInt(section, key string) ([]int64, error) {
	values := make([]int64, len(r.nodes))
	for i, n := range r.nodes {
		info, err := redis.String(n.conn.Do("INFO", section))
		if err != nil {
			return nil, fmt.Errorf("INFO %s at %s: %w", section, n.addr, err)
		}
		value, ok := infoField(info, key)
		if !ok {
			return nil, fmt.Errorf("INFO %s at %s has no %s field", section, n.addr, key)
		}
		v, err := strconv.ParseInt(value, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("INFO %s at %s: %s %q: %w", section, n.addr, key, value, err)
		}
		values[i] = v
	}
	return values, nil
}

func sum[T int | int64 | float64](values []T) T {
	var total T
	for _, v := range values {
		total += v
	}
	return total
}

// usedMemory is INFO memory's used_memory, in bytes, over every primary.
func (r *redisInspector) usedMemory() (int64, error) {
	values, err := r.infoInt("memory", "used_memory")
	if err != nil {
		return 0, err
	}
	return sum(values), nil
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

// clientLists is CLIENT LIST TYPE normal of every primary.
func (r *redisInspector) clientLists() ([]string, error) {
	lists := make([]string, len(r.nodes))
	for i, n := range r.nodes {
		list, err := redis.String(n.conn.Do("CLIENT", "LIST", "TYPE", "normal"))
		if err != nil {
			return nil, fmt.Errorf("CLIENT LIST at %s: %w", n.addr, err)
		}
		lists[i] = list
	}
	return lists, nil
}

// countServerClients counts the lines of a CLIENT LIST answer whose name
// is not benchClientName and, when server is not nil, whose addr (the
// client's end) is one of server's sockets.
func countServerClients(list string, server *processSockets) int {
	count := 0
	for _, line := range strings.Split(list, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		own, fromServer := false, server == nil
		for _, field := range strings.Fields(line) {
			if field == "name="+benchClientName {
				own = true
			}
			if addr, ok := strings.CutPrefix(field, "addr="); ok && server != nil {
				fromServer = server.has(addr)
			}
		}
		if !own && fromServer {
			count++
		}
	}
	return count
}

// resetStats clears Redis' command statistics (CONFIG RESETSTAT) on every
// primary, so that INFO commandstats afterwards covers one phase.
func (r *redisInspector) resetStats() error {
	for _, n := range r.nodes {
		if _, err := n.conn.Do("CONFIG", "RESETSTAT"); err != nil {
			return fmt.Errorf("CONFIG RESETSTAT at %s: %w", n.addr, err)
		}
	}
	return nil
}

// commandStat is one line of INFO commandstats.
type commandStat struct {
	name  string
	calls int64
	usec  int64
}

// commandStats reads INFO commandstats of every primary, summed per
// command, busiest command first.
func (r *redisInspector) commandStats() ([]commandStat, error) {
	var all []commandStat
	for _, n := range r.nodes {
		info, err := redis.String(n.conn.Do("INFO", "commandstats"))
		if err != nil {
			return nil, fmt.Errorf("INFO commandstats at %s: %w", n.addr, err)
		}
		all = append(all, parseCommandStats(info)...)
	}
	return mergeCommandStats(all), nil
}

// mergeCommandStats sums the stats of each command, busiest first.
func mergeCommandStats(stats []commandStat) []commandStat {
	var merged []commandStat
	for _, s := range stats {
		i := slices.IndexFunc(merged, func(m commandStat) bool { return m.name == s.name })
		if i < 0 {
			merged = append(merged, s)
			continue
		}
		merged[i].calls += s.calls
		merged[i].usec += s.usec
	}
	slices.SortFunc(merged, func(a, b commandStat) int { return cmp.Compare(b.usec, a.usec) })
	return merged
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

// cpuSeconds is INFO cpu's used_cpu_user + used_cpu_sys of every primary's
// process, in the order of addrs.
func (r *redisInspector) cpuSeconds() ([]float64, error) {
	seconds := make([]float64, len(r.nodes))
	for i, n := range r.nodes {
		info, err := redis.String(n.conn.Do("INFO", "cpu"))
		if err != nil {
			return nil, fmt.Errorf("INFO cpu at %s: %w", n.addr, err)
		}
		for _, key := range []string{"used_cpu_user", "used_cpu_sys"} {
			value, ok := infoField(info, key)
			if !ok {
				return nil, fmt.Errorf("INFO cpu at %s has no %s field", n.addr, key)
			}
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				return nil, fmt.Errorf("INFO cpu at %s: %s %q: %w", n.addr, key, value, err)
			}
			seconds[i] += v
		}
	}
	return seconds, nil
}

// connectionsReceived is INFO stats' total_connections_received over every
// primary: how many connections they have accepted since they started.
func (r *redisInspector) connectionsReceived() (int64, error) {
	values, err := r.infoInt("stats", "total_connections_received")
	if err != nil {
		return 0, err
	}
	return sum(values), nil
}
