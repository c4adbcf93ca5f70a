// Package redisconn owns how the server reaches Redis: one server, the
// primary that Redis Sentinel names, or the primaries of a Redis Cluster by
// hash slot. It dials (credentials, TLS, timeouts), pools connections, drops
// connections to servers that were demoted, and in cluster mode keeps the
// slot map and follows redirects. It knows nothing of the queue's keys.
package redisconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gomodule/redigo/redis"
)

// MinRedisVersion is the oldest Redis the engine runs on.
const MinRedisVersion = "6.2.0"

// ErrUnavailable wraps the failures of CheckServer and CheckServers to get
// an answer from Redis, as opposed to an answer they do not accept.
var ErrUnavailable = errors.New("redis unavailable")

// Options says how to reach Redis: one server at Addr, the primary that
// Redis Sentinel names (SentinelAddrs and MasterName), or the primaries of
// a Redis Cluster (ClusterAddrs).
type Options struct {
	// Addr is the server's host:port. It is ignored when SentinelAddrs or
	// ClusterAddrs is set.
	Addr string
	// DB is the database SELECTed on every connection. A cluster has only
	// database 0: with ClusterAddrs it must be 0, and no SELECT is sent.
	DB int
	// Username selects an ACL user; it is sent only with a Password
	// (AUTH username password). In a cluster they apply to every node
	// (ACL users are per node), and the user also needs CLUSTER SLOTS
	// (+cluster|slots) for the slot map.
	Username string
	Password string
	// TLS encrypts the connections, to Redis, to the sentinels and to
	// every node of a cluster, with TLSConfig (nil: the system's roots).
	// The certificate must carry TLSConfig.ServerName when it is set, else
	// the host of the address dialed: for a cluster's nodes, the host part
	// of the address the cluster announces for them (CLUSTER SLOTS, MOVED),
	// usually an IP address, so their certificates need that IP as a
	// subject alternative name, or one name for all set in ServerName.
	TLS       bool
	TLSConfig *tls.Config
	// SentinelAddrs lists sentinels (host:port), asked in turn for the
	// address of the primary named MasterName each time a connection is
	// opened, so that new connections follow a failover.
	SentinelAddrs []string
	MasterName    string
	// ClusterAddrs lists seed nodes of a Redis Cluster (host:port); setting
	// it selects cluster mode. The seeds are asked for the first slot map;
	// later fetches ask the nodes the last map named first, then the
	// seeds. Any node of the cluster will do.
	ClusterAddrs []string

	// MaxIdle and MaxActive bound a pool: the one pool of a server or a
	// Sentinel-named primary, and in cluster mode each primary's own pool,
	// so a process opens up to MaxActive connections to every primary.
	MaxIdle        int
	MaxActive      int // 0 picks DefaultMaxActive: the engine never holds a connection per waiter
	ConnectTimeout time.Duration
	// ReadTimeout bounds waiting for a reply on a connection from Dial (a
	// blocking loop's, which sets its own per BLPOP too).
	ReadTimeout  time.Duration
	WriteTimeout time.Duration
	// CallTimeout bounds waiting for a reply on a pooled connection (0:
	// DefaultCallTimeout), or ReadTimeout when that is shorter: a primary
	// that hangs (stopped, or a machine gone without a reset) fails its
	// calls then instead of holding them and their pool's connections for
	// ReadTimeout, which must exceed the longest BLPOP. A command that waits
	// longer on purpose (WAIT) sets its own with redis.DoWithTimeout.
	CallTimeout time.Duration
}

// DefaultCallTimeout is the pooled connections' reply timeout when
// Options.CallTimeout is 0. No call of the engine's takes Redis near it.
const DefaultCallTimeout = 10 * time.Second

// pooled is o as the pools dial: with CallTimeout as the read timeout.
func (o Options) pooled() Options {
	t := o.CallTimeout
	if t <= 0 {
		t = DefaultCallTimeout
	}
	if o.ReadTimeout > 0 && o.ReadTimeout < t {
		t = o.ReadTimeout
	}
	o.ReadTimeout = t
	return o
}

// Cluster reports whether the options select cluster mode.
func (o Options) Cluster() bool { return len(o.ClusterAddrs) > 0 }

// validate rejects combinations no Redis deployment has.
func (o Options) validate() error {
	if !o.Cluster() {
		return nil
	}
	if len(o.SentinelAddrs) > 0 {
		return errors.New("redis: sentinel addresses and cluster addresses are exclusive")
	}
	if o.DB != 0 {
		return fmt.Errorf("redis: a cluster has only database 0, not %d", o.DB)
	}
	return nil
}

// DefaultMaxActive bounds the command pool when the configuration leaves
// redis.max_active at 0.
const DefaultMaxActive = 48

// NewTLSConfig returns the TLS settings for redis.tls: the certificates in
// the PEM file caFile as the only trusted roots (the system's roots when
// caFile is empty), and serverName as the name the server's certificate
// must carry (empty: the host of the address dialed).
func NewTLSConfig(caFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile == "" {
		return cfg, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("read CA certificates: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", caFile)
	}
	cfg.RootCAs = roots
	return cfg, nil
}

// Dial opens one connection to the primary: the server at Addr, or, with
// SentinelAddrs, the server the sentinels currently name as the primary
// (checked with ROLE). Connections that learn their server was demoted to a
// replica (a READONLY or MASTERDOWN reply) report it through Err, so the
// pool closes them instead of reusing them, and the blocking loops redial.
// In cluster mode it fails: a connection there serves some slots only, see
// Client.Dial.
func (o Options) Dial() (redis.Conn, error) { return o.dialContext(context.Background()) }

// dialContext is Dial within ctx (the sentinels' questions excepted, which
// have their own bounds): a pool's dial for a caller with a deadline.
func (o Options) dialContext(ctx context.Context) (redis.Conn, error) {
	if o.Cluster() {
		return nil, errClusterDial
	}
	if len(o.SentinelAddrs) > 0 {
		return o.dialPrimary()
	}
	c, err := o.dialServerContext(ctx, o.Addr)
	if err != nil {
		return nil, err
	}
	return &primaryConn{Conn: c}, nil
}

// errClusterDial is what Options.Dial and a pool from NewPool answer in
// cluster mode.
var errClusterDial = errors.New("redis: in cluster mode connections are opened per node by a Client")

// dialServer opens a connection to the Redis server at addr with the
// options' credentials, TLS settings, database and timeouts.
func (o Options) dialServer(addr string) (redis.Conn, error) {
	return o.dialServerContext(context.Background(), addr)
}

// dialServerContext is dialServer within ctx: the connection and the
// commands of the handshake (AUTH, SELECT) end with it too.
func (o Options) dialServerContext(ctx context.Context, addr string) (redis.Conn, error) {
	opts := []redis.DialOption{
		redis.DialConnectTimeout(o.ConnectTimeout),
		redis.DialReadTimeout(o.ReadTimeout),
		redis.DialWriteTimeout(o.WriteTimeout),
		redis.DialUseTLS(o.TLS),
		redis.DialTLSConfig(o.TLSConfig),
	}
	if !o.Cluster() {
		opts = append(opts, redis.DialDatabase(o.DB))
	}
	if o.Password != "" {
		opts = append(opts, redis.DialUsername(o.Username), redis.DialPassword(o.Password))
	}
	c, err := redis.DialContext(ctx, "tcp", addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to redis at %s: %w", addr, err)
	}
	return c, nil
}

// NewPool returns a connection pool for short commands and scripts, to the
// server or the Sentinel-named primary (in cluster mode its connections
// fail: use a Client).
func NewPool(o Options) *redis.Pool {
	p := o.pooled()
	return p.newPool(p.dialContext, len(o.SentinelAddrs) > 0)
}

// newPool returns a pool of connections from dial. followSentinel makes it
// check the role of connections idle for a while.
func (o Options) newPool(dial func(context.Context) (redis.Conn, error), followSentinel bool) *redis.Pool {
	maxActive := o.MaxActive
	if maxActive <= 0 {
		maxActive = DefaultMaxActive
	}
	maxIdle := o.MaxIdle
	if o.MaxActive <= 0 {
		// The server chose the pool's size: keep all of it. Fewer idle
		// connections than concurrent requests makes the pool close and
		// redial connections under load (the original's max_idle = 10
		// against 32 clients cost 15% of the server's CPU in dialing).
		maxIdle = maxActive
	}
	if maxIdle > maxActive {
		maxIdle = maxActive
	}
	p := &redis.Pool{
		MaxIdle:     maxIdle,
		MaxActive:   maxActive,
		Wait:        true,
		IdleTimeout: 240 * time.Second,
		DialContext: dial,
	}
	// lastFailed is when a check of an idle connection failed last, in
	// Unix nanoseconds.
	var lastFailed atomic.Int64
	p.TestOnBorrowContext = func(ctx context.Context, c redis.Conn, returned time.Time) error {
		idle := time.Since(returned)
		// A failover may have demoted the server while the connection sat
		// idle. Busy connections skip the check: they come back within
		// milliseconds, and a write on a demoted server fails with
		// READONLY, which drops the connection anyway.
		role := followSentinel && idle >= roleCheckAfterIdle
		if !role && idle < 30*time.Second {
			return nil
		}
		// Within the caller's time and borrowCheckTimeout. Once a check
		// failed, the pool's other idle connections are dropped unchecked
		// for a moment: a Redis that hangs costs a borrower one check, not
		// one per idle connection.
		if failed := lastFailed.Load(); failed != 0 && time.Since(time.Unix(0, failed)) < borrowCheckTimeout {
			return errIdleCheckFailed
		}
		ctx, cancel := context.WithTimeout(ctx, borrowCheckTimeout)
		defer cancel()
		var err error
		if role {
			err = checkPrimaryContext(ctx, c)
		} else {
			_, err = redis.DoContext(c, ctx, "PING")
		}
		if err != nil {
			lastFailed.Store(time.Now().UnixNano())
		}
		return err
	}
	initPool(p)
	return p
}

// initPool makes redigo set up the pool's limit on active connections now,
// without dialing: a Get with a context already cancelled does only that.
// redigo sets it up on the first Get otherwise, unsynchronized with Close,
// and a cluster client may close a node's pool (the node left the map)
// while a Get on it is under way.
func initPool(p *redis.Pool) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if conn, err := p.GetContext(ctx); err == nil {
		conn.Close()
	}
}

// roleCheckAfterIdle is how long a pooled connection may sit idle, with
// Sentinel, before it is checked again to be talking to the primary.
const roleCheckAfterIdle = time.Second

// borrowCheckTimeout bounds the check of an idle connection a borrower is
// given (a PING, or ROLE with Sentinel).
const borrowCheckTimeout = time.Second

// errIdleCheckFailed drops an idle connection unchecked, a moment after
// the check of another failed.
var errIdleCheckFailed = errors.New("redis: an idle connection's check failed a moment ago")

// errDemoted is the Err of a connection whose server answered that it is
// not (or no longer) a writable primary.
var errDemoted = errors.New("redis server is no longer the primary (READONLY or MASTERDOWN reply)")

// primaryConn is a connection to a server believed to be the primary. A
// reply saying the server is a replica marks it broken: redigo's pool
// closes connections whose Err is not nil when they are returned, so the
// next command dials again, and with Sentinel finds the new primary.
//
// In cluster mode it also reports every error to the Client (noteReply),
// so that redirects met by any connection, pooled or dialed for a BLPOP,
// update the slot map.
type primaryConn struct {
	redis.Conn
	demoted atomic.Bool
	// addr and cluster are set in cluster mode only.
	addr    string
	cluster *Client
}

var (
	_ redis.ConnWithTimeout = (*primaryConn)(nil)
	_ redis.ConnWithContext = (*primaryConn)(nil)
)

// note marks the connection broken when err is a reply from a replica.
func (c *primaryConn) note(reply any, err error) (any, error) {
	if err == nil {
		return reply, nil
	}
	var redisErr redis.Error
	if errors.As(err, &redisErr) && isReplicaReply(redisErr) {
		c.demoted.Store(true)
	}
	if c.cluster != nil {
		c.cluster.noteReply(err, c.addr)
	}
	return reply, err
}

// isReplicaReply tells the error replies only a replica gives: a write
// refused (READONLY, also from scripts) or a replica cut from its primary
// (MASTERDOWN).
func isReplicaReply(err redis.Error) bool {
	return strings.HasPrefix(string(err), "READONLY") || strings.HasPrefix(string(err), "MASTERDOWN")
}

func (c *primaryConn) Err() error {
	if err := c.Conn.Err(); err != nil {
		return err
	}
	if c.demoted.Load() {
		return errDemoted
	}
	return nil
}

func (c *primaryConn) Do(cmd string, args ...any) (any, error) {
	return c.note(c.Conn.Do(cmd, args...))
}

func (c *primaryConn) Receive() (any, error) {
	return c.note(c.Conn.Receive())
}

func (c *primaryConn) DoWithTimeout(timeout time.Duration, cmd string, args ...any) (any, error) {
	return c.note(redis.DoWithTimeout(c.Conn, timeout, cmd, args...))
}

func (c *primaryConn) ReceiveWithTimeout(timeout time.Duration) (any, error) {
	return c.note(redis.ReceiveWithTimeout(c.Conn, timeout))
}

func (c *primaryConn) DoContext(ctx context.Context, cmd string, args ...any) (any, error) {
	return c.note(redis.DoContext(c.Conn, ctx, cmd, args...))
}

func (c *primaryConn) ReceiveContext(ctx context.Context) (any, error) {
	return c.note(redis.ReceiveContext(c.Conn, ctx))
}

// CheckServer verifies that the Redis behind pool answers and is new
// enough.
func CheckServer(ctx context.Context, pool *redis.Pool) error {
	c, err := pool.GetContext(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	defer c.Close()
	return checkVersion(c)
}

// tlsHint adds advice to err when the server closed or reset a plain-text
// connection at its first command, which is what a server that accepts TLS
// only does.
func (o Options) tlsHint(err error) error {
	if o.TLS || err == nil {
		return err
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
		return fmt.Errorf("%w (if the server accepts TLS only, set redis.tls = true)", err)
	}
	return err
}

// checkVersion asks the server on c for its version and refuses one older
// than MinRedisVersion.
func checkVersion(c redis.Conn) error {
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
