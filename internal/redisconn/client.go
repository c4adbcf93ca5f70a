package redisconn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/pause"
)

// Observer receives the events of cluster routing, for metrics. Its
// methods are called from many goroutines.
type Observer interface {
	// Redirect counts a redirect reply met on any connection to a cluster
	// node: kind is RedirectMoved, RedirectAsk, RedirectTryAgain or
	// RedirectClusterDown.
	Redirect(kind string)
	// MapRefresh counts an attempt to fetch the slot map, and whether a
	// node gave it; when one did, the map is in use when it is called.
	MapRefresh(ok bool)
}

type nopObserver struct{}

func (nopObserver) Redirect(string) {}
func (nopObserver) MapRefresh(bool) {}

// ErrClosed is returned by a cluster Client's methods after Close (without
// a cluster, redigo's pool answers with its own error).
var ErrClosed = errors.New("redis client closed")

const (
	// defaultRefreshInterval is how often the slot map is fetched when
	// nothing asked for it, so that a resharding that met none of this
	// process's calls (or a new replica) is learnt anyway.
	defaultRefreshInterval = 15 * time.Second
	// minRefreshGap separates two fetches of the slot map: a storm of
	// MOVED replies, one per call in flight, costs one fetch.
	minRefreshGap = 200 * time.Millisecond
	// refreshTimeout bounds one fetch, all nodes asked included.
	refreshTimeout = 10 * time.Second
	// maxAttempts bounds the runs of f, and the connections asked for,
	// in one Do; maxDialAttempts the connections one Dial tries.
	maxAttempts     = 8
	maxDialAttempts = 3
	// The pause before retrying after TRYAGAIN or CLUSTERDOWN starts at
	// firstBackoff and doubles up to maxBackoff: with maxAttempts, a Do
	// gives up after about 1.6 s of them.
	firstBackoff = 25 * time.Millisecond
	maxBackoff   = 400 * time.Millisecond
)

// Client reaches the Redis the options name: in standalone and Sentinel
// mode through one pool, in cluster mode through a pool per primary chosen
// by the key's hash slot. It is safe for concurrent use; a process needs
// one.
type Client struct {
	opts Options
	log  *slog.Logger
	obs  Observer

	// single is the pool without a cluster.
	single *redis.Pool

	// Cluster mode. slots is read without a lock; mu orders its writers
	// and guards pools (nil once closed) and movedDuringFetch.
	slots atomic.Pointer[slotMap]
	mu    sync.Mutex
	pools map[string]*redis.Pool
	// movedDuringFetch holds the owners MOVED replies named while a fetch
	// of the map was under way (nil when none is): the fetched map may
	// predate them, so they are laid over it.
	movedDuringFetch map[int]string

	refreshEvery    time.Duration
	refreshRequests chan struct{} // holds at most one request
	refreshMu       sync.Mutex
	// nextRefresh is closed when the next fetch to start has ended.
	nextRefresh    chan struct{}
	refreshFailing bool // owned by the refresh loop
	ctx            context.Context
	cancel         context.CancelFunc
	loopDone       chan struct{}
	closeOnce      sync.Once
}

// New returns a Client for opts. Without a cluster it does not touch Redis.
// In cluster mode it fetches the slot map before returning, and fails when
// no node gives it; it then keeps the map fresh until Close: at once after
// a MOVED, CLUSTERDOWN, READONLY, MASTERDOWN or UNBLOCKED reply or a
// connection error, and 15 s after the last fetch.
// logger and obs may be nil.
func New(opts Options, logger *slog.Logger, obs Observer) (*Client, error) {
	return newClient(opts, logger, obs, defaultRefreshInterval)
}

func newClient(opts Options, logger *slog.Logger, obs Observer, refreshEvery time.Duration) (*Client, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if obs == nil {
		obs = nopObserver{}
	}
	c := &Client{opts: opts, log: logger, obs: obs}
	if !opts.Cluster() {
		c.single = NewPool(opts)
		return c, nil
	}
	c.slots.Store(emptySlotMap())
	c.pools = map[string]*redis.Pool{}
	c.refreshEvery = refreshEvery
	c.refreshRequests = make(chan struct{}, 1)
	c.nextRefresh = make(chan struct{})
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.loopDone = make(chan struct{})

	ctx, cancel := context.WithTimeout(c.ctx, refreshTimeout)
	m, err := c.fetchSlotMap(ctx)
	cancel()
	if err != nil {
		obs.MapRefresh(false)
		c.cancel()
		return nil, fmt.Errorf("redis cluster at %s: %w", strings.Join(opts.ClusterAddrs, ","), err)
	}
	obs.MapRefresh(true)
	c.install(m)
	go c.refreshLoop()
	return c, nil
}

// Cluster reports whether the client routes by slot.
func (c *Client) Cluster() bool { return c.single == nil }

// ServerOf is the address of the primary serving key's slot by the map the
// client holds now ("" when it knows none), or "" for one Redis.
func (c *Client) ServerOf(key string) string {
	if c.single != nil {
		return ""
	}
	return c.slots.Load().addr(Slot(key))
}

// Close closes every pool and stops the map's refreshes. Connections from
// Dial are the caller's to close.
func (c *Client) Close() error {
	if c.single != nil {
		return c.single.Close()
	}
	c.closeOnce.Do(func() {
		c.cancel()
		<-c.loopDone
		c.mu.Lock()
		pools := c.pools
		c.pools = nil
		c.mu.Unlock()
		for _, p := range pools {
			p.Close()
		}
	})
	return nil
}

// Do runs f on a pooled connection to the primary serving key's hash slot
// (without a cluster, on the one pool; key is then ignored), and returns
// f's error.
//
// In cluster mode, when f's commands were refused because of where or when
// they were sent, Do follows and runs f again, up to 8 times in all: after
// MOVED on the slot's new primary (the map is updated at once and fetched
// again); after ASK once on the target, with ASKING sent before each of f's
// commands; after TRYAGAIN or CLUSTERDOWN after a pause (25 ms, doubling up
// to 400 ms); after READONLY or MASTERDOWN once the map is fetched again.
// It does so only when every reply f received was such a refusal (or
// NOSCRIPT, or FCALL's "Function not found", with FUNCTION's own replies left
// out): Redis gives them before running a command, so nothing ran. f
// must therefore send the command carrying key first, keep all its keys in
// key's slot, and be safe to run again when that command was refused. In a
// pipeline, the replies f reads are what counts: one it leaves unread is
// taken to be refused like the others (its command is in the same slot); a
// Do after Sends reads their replies in bulk, so it counts as commands that
// ran.
//
// A connection error after a command was sent is returned, not retried (the
// command may have run); it makes the client fetch the map again. A failure
// to get a connection (the node is down) is retried once the map was
// fetched again.
func (c *Client) Do(ctx context.Context, key string, f func(redis.Conn) error) error {
	if c.single != nil {
		return doOn(ctx, c.single, f)
	}
	slot := Slot(key)
	backoff := firstBackoff
	var ask string // an ASK's target, for the next attempt only
	for attempt := 1; ; attempt++ {
		last := attempt == maxAttempts
		addr, asking := ask, ask != ""
		ask = ""
		if addr == "" {
			addr = c.slots.Load().addr(slot)
		}
		if addr == "" {
			err := fmt.Errorf("redis cluster: no primary known for slot %d", slot)
			if last {
				return err
			}
			if werr := c.awaitRefresh(ctx); werr != nil {
				return errors.Join(err, werr)
			}
			continue
		}
		conn, err := c.get(ctx, addr)
		if err != nil {
			if last || ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return err
			}
			if werr := c.awaitRefresh(ctx); werr != nil {
				return errors.Join(err, werr)
			}
			continue
		}
		routed := &routedConn{Conn: conn, addr: addr, asking: asking}
		err = f(routed)
		conn.Close()
		if err == nil || !routed.retrySafe() || last {
			return err
		}
		// The connection noted the redirect already (primaryConn.note):
		// the map knows a MOVED's new owner, and a fetch is on its way.
		switch replyCode(routed.first) {
		case "MOVED":
		case "ASK":
			r, ok := parseRedirect(routed.first, addr)
			if !ok {
				return err
			}
			ask = r.addr
		case "TRYAGAIN", "CLUSTERDOWN":
			if werr := pause.For(ctx, backoff); werr != nil {
				return err
			}
			backoff = min(2*backoff, maxBackoff)
		default: // READONLY, MASTERDOWN: the node is a replica now
			if werr := c.awaitRefresh(ctx); werr != nil {
				return err
			}
		}
	}
}

// Dial opens a connection of its own, not pooled, to the primary serving
// key's hash slot (without a cluster, to the server or the Sentinel-named
// primary), for a blocking command such as BLPOP. The caller closes it.
//
// A connection from Dial reports the redirects and errors it meets to the
// client like a pooled one: when its slot moves, Redis unblocks a BLPOP with
// MOVED (or CLUSTERDOWN, or UNBLOCKED), the map learns the new owner or is
// fetched again, and a Dial made after the caller closed the connection
// goes to where the slot is now. During a migration a BLPOP on an empty
// list is answered ASK at once; the caller should pause before dialing
// again. A failure to connect is retried, up to 3 dials in all, each after
// the map was fetched again.
func (c *Client) Dial(ctx context.Context, key string) (redis.Conn, error) {
	if c.single != nil {
		return c.opts.Dial()
	}
	slot := Slot(key)
	var lastErr error
	for attempt := 1; attempt <= maxDialAttempts; attempt++ {
		if attempt > 1 {
			if err := c.awaitRefresh(ctx); err != nil {
				return nil, errors.Join(lastErr, err)
			}
		}
		addr := c.slots.Load().addr(slot)
		if addr == "" {
			lastErr = fmt.Errorf("redis cluster: no primary known for slot %d", slot)
			continue
		}
		conn, err := c.dialNode(ctx, addr, false)
		if err == nil {
			return conn, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// Primaries returns the addresses of the primaries, sorted: in cluster mode
// those serving at least one slot in the current map; otherwise the one
// server (for Sentinel, the primary the sentinels name now).
func (c *Client) Primaries(ctx context.Context) ([]string, error) {
	if c.single != nil {
		if len(c.opts.SentinelAddrs) > 0 {
			addr, err := c.opts.discoverPrimary()
			if err != nil {
				return nil, err
			}
			return []string{addr}, nil
		}
		return []string{c.opts.Addr}, nil
	}
	if addrs := c.slots.Load().serving(); len(addrs) > 0 {
		return addrs, nil
	}
	if err := c.awaitRefresh(ctx); err != nil {
		return nil, err
	}
	if addrs := c.slots.Load().serving(); len(addrs) > 0 {
		return addrs, nil
	}
	return nil, errors.New("redis cluster: no primary serves any slot")
}

// CheckServers verifies that every primary answers and is new enough.
func (c *Client) CheckServers(ctx context.Context) error {
	if c.single != nil {
		return c.opts.tlsHint(CheckServer(ctx, c.single))
	}
	primaries, err := c.Primaries(ctx)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	for _, addr := range primaries {
		conn, err := c.get(ctx, addr)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		err = checkVersion(conn)
		conn.Close()
		if err != nil {
			return fmt.Errorf("redis at %s: %w", addr, err)
		}
	}
	return nil
}

// Stats sums the pools' statistics: in cluster mode, over every primary.
func (c *Client) Stats() redis.PoolStats {
	if c.single != nil {
		return c.single.Stats()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var sum redis.PoolStats
	for _, p := range c.pools {
		s := p.Stats()
		sum.ActiveCount += s.ActiveCount
		sum.IdleCount += s.IdleCount
		sum.WaitCount += s.WaitCount
		sum.WaitDuration += s.WaitDuration
	}
	return sum
}

// doOn runs f on a connection from pool.
func doOn(ctx context.Context, pool *redis.Pool, f func(redis.Conn) error) error {
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(conn)
}

// get returns a pooled connection to the node at addr.
func (c *Client) get(ctx context.Context, addr string) (redis.Conn, error) {
	c.mu.Lock()
	if c.pools == nil {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	p := c.pools[addr]
	if p == nil {
		p = c.opts.newPool(func(ctx context.Context) (redis.Conn, error) { return c.dialNode(ctx, addr, true) }, false)
		c.pools[addr] = p
	}
	c.mu.Unlock()
	return p.GetContext(ctx)
}

// dialNode opens a connection to the cluster node at addr that reports its
// redirects and errors to the client: for a pool (with the pools' reply
// timeout), or for a caller of Dial.
func (c *Client) dialNode(ctx context.Context, addr string, pooled bool) (redis.Conn, error) {
	if c.ctx.Err() != nil {
		return nil, ErrClosed
	}
	opts := c.opts
	if pooled {
		opts = opts.pooled()
	}
	conn, err := opts.dialServerContext(ctx, addr)
	if err != nil {
		c.requestRefresh()
		return nil, err
	}
	return &primaryConn{Conn: conn, addr: addr, cluster: c}, nil
}

// noteReply is how every connection to a node reports an error: it counts
// redirects, records a MOVED's new owner and asks for the map again when
// the node may no longer be what the map says.
func (c *Client) noteReply(err error, from string) {
	if kind := RedirectKind(err); kind != "" {
		c.obs.Redirect(kind)
	}
	switch replyCode(err) {
	case "MOVED":
		if r, ok := parseRedirect(err, from); ok {
			c.noteMoved(r.slot, r.addr)
		}
		c.requestRefresh()
	case "CLUSTERDOWN", "READONLY", "MASTERDOWN", "UNBLOCKED":
		c.requestRefresh()
	case "":
		// A connection error, unless the caller gave up waiting.
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			c.requestRefresh()
		}
	}
}

// noteMoved records that addr serves slot now, until the next fetched map.
func (c *Client) noteMoved(slot int, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.movedDuringFetch != nil {
		c.movedDuringFetch[slot] = addr
	}
	if m := c.slots.Load(); m.addr(slot) != addr {
		c.slots.Store(m.withOwner(slot, addr))
	}
}

// install publishes a fetched map, with the MOVED replies met during the
// fetch laid over it, and closes the pools of the nodes that are no longer
// primaries in it.
func (c *Client) install(m *slotMap) {
	c.mu.Lock()
	for slot, addr := range c.movedDuringFetch {
		m.setOwner(slot, addr)
	}
	c.movedDuringFetch = nil
	before := c.slots.Load().serving()
	c.slots.Store(m)
	var gone []*redis.Pool
	for addr, p := range c.pools {
		if !slices.Contains(m.primaries, addr) {
			gone = append(gone, p)
			delete(c.pools, addr)
		}
	}
	c.mu.Unlock()
	for _, p := range gone {
		p.Close()
	}
	if after := m.serving(); !slices.Equal(after, before) {
		c.log.Info("redis cluster primaries", "primaries", strings.Join(after, ","), "slots_served", m.covered())
	}
}

// requestRefresh asks the refresh loop for a fetch of the map, without
// waiting; requests made before it starts share one fetch.
func (c *Client) requestRefresh() {
	select {
	case c.refreshRequests <- struct{}{}:
	default:
	}
}

// awaitRefresh asks for a fetch of the map and waits until one that
// started after the call has ended (successfully or not).
func (c *Client) awaitRefresh(ctx context.Context) error {
	c.refreshMu.Lock()
	next := c.nextRefresh
	c.refreshMu.Unlock()
	c.requestRefresh()
	select {
	case <-next:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// refreshLoop fetches the map when asked or refreshEvery after the last
// fetch, at most once per minRefreshGap, until Close.
func (c *Client) refreshLoop() {
	defer close(c.loopDone)
	timer := time.NewTimer(c.refreshEvery)
	defer timer.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-timer.C:
		case <-c.refreshRequests:
		}
		c.refresh()
		timer.Reset(c.refreshEvery)
		if pause.For(c.ctx, minRefreshGap) != nil {
			return
		}
	}
}

// refresh fetches the map once and installs it; it logs the first failure
// of a run of them, and the recovery.
func (c *Client) refresh() {
	c.refreshMu.Lock()
	done := c.nextRefresh
	c.nextRefresh = make(chan struct{})
	c.refreshMu.Unlock()
	defer close(done)

	c.mu.Lock()
	c.movedDuringFetch = map[int]string{}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(c.ctx, refreshTimeout)
	m, err := c.fetchSlotMap(ctx)
	cancel()
	if err != nil {
		c.mu.Lock()
		c.movedDuringFetch = nil
		c.mu.Unlock()
		c.obs.MapRefresh(false)
		if !c.refreshFailing && c.ctx.Err() == nil {
			c.log.Warn("cannot fetch the redis cluster slot map; routing by the last one", "err", err)
		}
		c.refreshFailing = true
		return
	}
	// Counted before it is installed: whoever routes by the new map (or
	// reads the count after a call that did) finds the fetch counted.
	c.obs.MapRefresh(true)
	c.install(m)
	if c.refreshFailing {
		c.log.Info("fetched the redis cluster slot map again")
		c.refreshFailing = false
	}
}
