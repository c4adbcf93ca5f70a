package delayqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Options configure a Queue.
type Options struct {
	BucketSize   int           // number of bucket ZSETs
	BucketName   string        // template with one %d; buckets are numbered 1..BucketSize
	QueueName    string        // template with one %s (the topic): the ready lists
	KeyPrefix    string        // namespace for job hashes and other keys; default "dq_"
	BlockTimeout time.Duration // the longest a Pop may hold (queue_block_timeout)
	ScanInterval time.Duration // safety-net scan period; 0 means 1s
	// Dial opens the dedicated connections of the blocking dispatch loops.
	Dial func() (redis.Conn, error)
	// Dispatchers is the number of blocking dispatch loops; 0 means 4.
	Dispatchers int
	// MoveBatch bounds the ids one move-due script call moves; 0 means 500.
	MoveBatch int
	// DeadMaxPerTopic caps each topic's dead letters (the oldest are
	// dropped); 0 means 10000.
	DeadMaxPerTopic int
	// DeadTTL is how long dead letters are kept; 0 means 7 days.
	DeadTTL time.Duration
	// WaitReplicas, when above 0, makes every acknowledged change wait
	// (Redis WAIT) until that many replicas have it, for up to WaitTimeout.
	WaitReplicas int
	WaitTimeout  time.Duration
	// MaxHeldPops bounds the Pops this process holds at once; beyond it
	// Pop fails with ErrTooManyWaiters. 0 means 20000.
	MaxHeldPops int
	// Observer receives events for metrics; nil ignores them.
	Observer Observer
}

const (
	defaultKeyPrefix   = "dq_"
	defaultDispatchers = 4
	defaultMoveBatch   = 500
	defaultMaxHeldPops = 20000
	// singleSlots and batchSlots bound the script calls of one kind in
	// flight at once, for calls of one item and for larger ones (see
	// lanes); calls arriving meanwhile share the next one.
	singleSlots = 2
	batchSlots  = 2
	// maxClaimsPerCall bounds the jobs one shared claim script may take.
	maxClaimsPerCall = 500
	// Dead letters kept per topic, and for how long.
	defaultDeadMaxPerTopic = 10000
	defaultDeadTTL         = 7 * 24 * time.Hour
	// wakeTokenCap bounds a topic's wake-up list: tokens only wake waiters,
	// so more than there can be waiters is waste.
	wakeTokenCap = 10000
	// maxStaleSkips bounds the stale ready-list entries one claim drops.
	maxStaleSkips = 1000
)

// Queue is the delay-queue engine on one Redis database. Several Queues (in
// one or several processes) may share the database: every state change is a
// single atomic script.
type Queue struct {
	pool    *redis.Pool
	opts    Options
	log     *slog.Logger
	keys    keySchema
	scripts scripts
	// argvHeader starts every script call's ARGV (see scriptHeader).
	argvHeader []any
	instance   string

	scanners []*scanner
	waiters  *waiterRegistry
	loops    []*dispatchLoop

	stopOnce    sync.Once
	stopWaiting chan struct{}
	redisDown   atomic.Bool
	held        atomic.Int64
	obs         Observer
	health      *loopMonitor

	// Concurrent pushes, claims, finishes and deletes share script calls.
	pushes   *lanes[pushCall, pushReply]
	claims   *lanes[claimCall, []*Delivery]
	finishes *lanes[[]any, []removal]
	deletes  *lanes[[]any, []removal]
}

// New builds a Queue. It does not touch Redis; Run starts the background
// work.
func New(pool *redis.Pool, opts Options, logger *slog.Logger) (*Queue, error) {
	if opts.BucketSize < 1 {
		return nil, fmt.Errorf("bucket size must be at least 1, got %d", opts.BucketSize)
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = defaultKeyPrefix
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = time.Second
	}
	if opts.Dispatchers <= 0 {
		opts.Dispatchers = defaultDispatchers
	}
	if opts.MoveBatch <= 0 {
		opts.MoveBatch = defaultMoveBatch
	}
	if opts.DeadMaxPerTopic <= 0 {
		opts.DeadMaxPerTopic = defaultDeadMaxPerTopic
	}
	if opts.DeadTTL <= 0 {
		opts.DeadTTL = defaultDeadTTL
	}
	if opts.WaitReplicas > 0 && opts.WaitTimeout <= 0 {
		opts.WaitTimeout = time.Second
	}
	if opts.MaxHeldPops <= 0 {
		opts.MaxHeldPops = defaultMaxHeldPops
	}
	if opts.Observer == nil {
		opts.Observer = NopObserver{}
	}
	if opts.BlockTimeout <= 0 {
		opts.BlockTimeout = 178 * time.Second
	}
	if opts.Dial == nil {
		opts.Dial = pool.Dial
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	keys, err := newKeySchema(opts)
	if err != nil {
		return nil, err
	}
	sc, err := loadScripts()
	if err != nil {
		return nil, err
	}
	var idBytes [6]byte
	if _, err := rand.Read(idBytes[:]); err != nil {
		return nil, fmt.Errorf("instance id: %w", err)
	}
	q := &Queue{
		pool:        pool,
		opts:        opts,
		log:         logger,
		keys:        keys,
		scripts:     sc,
		argvHeader:  scriptHeader(keys, opts),
		instance:    hex.EncodeToString(idBytes[:]),
		stopWaiting: make(chan struct{}),
		obs:         opts.Observer,
	}
	q.health = newLoopMonitor(logger, opts.Observer, time.Now, loopKinds(opts)...)
	q.pushes = newLanes(MaxPushBatchJobs, func(c pushCall) int { return c.jobs }, q.execPushes)
	q.claims = newLanes(maxClaimsPerCall, func(c claimCall) int { return c.count }, q.execClaims)
	idCount := func(ids []any) int { return len(ids) }
	q.finishes = newLanes(MaxIDsPerCall, idCount, q.execRemovals(sc.finish))
	q.deletes = newLanes(MaxIDsPerCall, idCount, q.execRemovals(sc.remove))
	for i := 1; i <= opts.BucketSize; i++ {
		q.scanners = append(q.scanners, newScanner(q, i))
	}
	q.waiters = newWaiterRegistry(opts.Dispatchers)
	for i := 0; i < opts.Dispatchers; i++ {
		q.loops = append(q.loops, newDispatchLoop(q, i))
	}
	return q, nil
}

// Run loads the scripts and runs the bucket scanners and the dispatch loops
// until ctx is done. It returns nil after a clean stop.
func (q *Queue) Run(ctx context.Context) error {
	if err := q.withConn(ctx, func(c redis.Conn) error { return q.scripts.loadAll(c) }); err != nil {
		q.log.Warn("could not preload scripts; they will be sent on first use", "err", err)
	}
	var wg sync.WaitGroup
	for _, s := range q.scanners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.run(ctx)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.sweepDeadLetters(ctx)
	}()
	for _, l := range q.loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(ctx)
		}()
	}
	// Blocked loops would see ctx only when their BLPOP times out: wake
	// them, so a shutdown does not wait for it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		var interrupts sync.WaitGroup
		for _, l := range q.loops {
			interrupts.Add(1)
			go func() {
				defer interrupts.Done()
				l.interrupt()
			}()
		}
		interrupts.Wait()
	}()
	wg.Wait()
	return nil
}

// StopWaiting answers every held Pop at once with no job, and makes later
// Pops return without holding. Called first on shutdown.
func (q *Queue) StopWaiting() {
	q.stopOnce.Do(func() { close(q.stopWaiting) })
}

// Ping checks that Redis answers.
func (q *Queue) Ping(ctx context.Context) error {
	return q.withConn(ctx, func(c redis.Conn) error {
		_, err := c.Do("PING")
		return err
	})
}

// withConn runs f on a pooled connection and records whether Redis answered.
// Failures to reach Redis come back wrapped in ErrUnavailable.
func (q *Queue) withConn(ctx context.Context, f func(redis.Conn) error) error {
	c, err := q.pool.GetContext(ctx)
	if err != nil {
		q.noteRedis(err)
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	err = f(c)
	c.Close()
	if err != nil {
		var redisErr redis.Error
		if errors.As(err, &redisErr) && !transientRedisError(redisErr) {
			// Redis answered, with an error: a bug or a misuse, not an outage.
			q.noteRedis(nil)
			return err
		}
		q.noteRedis(err)
		if errors.Is(err, ErrInvalidJob) || errors.Is(err, ErrNotReplicated) || errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	q.noteRedis(nil)
	return nil
}

// transientRedisError tells the error replies that mean "Redis can't serve
// now" (loading its data, a replica after a failover, a busy script) from
// real errors.
func transientRedisError(err redis.Error) bool {
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "NOREPLICAS", "BUSY", "TRYAGAIN", "CLUSTERDOWN"} {
		if strings.HasPrefix(string(err), p) {
			return true
		}
	}
	return false
}

// noteRedis logs the loss and the recovery of Redis once each.
func (q *Queue) noteRedis(err error) {
	if err == nil {
		if q.redisDown.CompareAndSwap(true, false) {
			q.log.Info("redis is reachable again")
		}
		return
	}
	if errors.Is(err, context.Canceled) {
		return
	}
	q.obs.RedisError()
	if q.redisDown.CompareAndSwap(false, true) {
		q.log.Error("redis is unreachable", "err", err)
	}
}
