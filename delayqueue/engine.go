package delayqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/defaults"
)

// Options configure a Queue.
type Options struct {
	// BucketSize is the number of partitions (bucket_size). It must match
	// the count the data was written with (see ResolvePartitions).
	BucketSize int
	BucketName string // template with one %d: the partitions' tags, and the original's buckets
	QueueName  string // template with one %s: the original's ready lists, for the import
	KeyPrefix  string // namespace of the engine's keys; default defaults.KeyPrefix
	// BlockTimeout is the longest a Pop may hold (queue_block_timeout); 0
	// means defaults.QueueBlockTimeout.
	BlockTimeout time.Duration
	ScanInterval time.Duration // safety-net scan period; 0 means 1s
	// MoveBatch bounds the jobs one move-due script call handles; 0 means 500.
	MoveBatch int
	// DeadMaxPerTopic caps each topic's dead letters, shared out over the
	// partitions (the oldest are dropped); 0 means defaults.DeadMaxPerTopic.
	DeadMaxPerTopic int
	// DeadTTL is how long dead letters are kept; 0 means defaults.DeadTTL.
	DeadTTL time.Duration
	// WaitReplicas, when above 0, makes every acknowledged change wait
	// (Redis WAIT) until that many replicas have it, for up to WaitTimeout
	// (0 means defaults.RedisWaitTimeout).
	WaitReplicas int
	WaitTimeout  time.Duration
	// MaxHeldPops bounds the Pops this process holds at once; beyond it
	// Pop fails with ErrTooManyWaiters. 0 means defaults.MaxHeldPops.
	MaxHeldPops int
	// Observer receives events for metrics; nil ignores them.
	Observer Observer
	// Cluster says the data is on a Redis Cluster: the layouts older than
	// partitions, which never ran on one, are not looked for.
	Cluster bool
	// CheckKeys makes every partition script fail when it touches a key it
	// was not given, or a key of another hash slot (for tests: see
	// scripts/check.lua).
	CheckKeys bool
}

const (
	defaultMoveBatch = 500
	// loopsPerPartitionTotal is the blocking dispatch loops a process
	// aims for in all; each partition gets at least one (see
	// loopsPerPartition).
	loopsPerPartitionTotal = 4
	// singleSlots and batchSlots bound the script calls of one kind in
	// flight at once per Redis server (the partitions it holds share them),
	// for calls of one item and for larger ones (see lanes); calls
	// arriving meanwhile share the next one. A server holding more than
	// singleSlots partitions (a cluster primary with 4 of the default 12)
	// has crowdedSingleSlots: its calls already split the jobs over more
	// partitions, and fewer in flight let each hold more (see
	// singleSlotsFor).
	singleSlots        = 3
	crowdedSingleSlots = 2
	batchSlots         = 2
	// maxClaimsPerCall bounds the jobs one shared claim script may take.
	maxClaimsPerCall = 500
	// wakeTokenCap bounds a wake-up list: tokens only wake waiters, so
	// more than there can be waiters is waste.
	wakeTokenCap = 10000
)

// Queue is the delay-queue engine on one Redis (a server, a Sentinel-named
// primary or a cluster). Several Queues, in one or several processes, may
// share the data: every state change is a single atomic script on one
// partition.
type Queue struct {
	rdb     Redis
	opts    Options
	log     *slog.Logger
	keys    keySchema
	scripts scripts
	// scriptsOnly is set once Redis refused functions (see runScript).
	scriptsOnly atomic.Bool
	// layoutChanged holds the ErrLayout error once the recorded layout no
	// longer matches this server's (see watchLayout): job calls answer it.
	layoutChanged atomic.Pointer[error]
	// argvHeader starts every script call's ARGV (see scriptHeader).
	argvHeader []any
	instance   string
	obs        Observer

	partitions []*partition
	waiters    *waiterRegistry
	health     *loopMonitor
	// nextClaim rotates the partition a webhook claim tries first.
	nextClaim atomic.Uint32
	// claimCursor is the partition Pops try first, and claimStint counts
	// the claims it served (see claim).
	claimCursor, claimStint atomic.Uint32

	// ready is closed once the migrations are done and the loops run;
	// until then the job methods answer ErrStarting.
	ready       chan struct{}
	readyOnce   sync.Once
	stopOnce    sync.Once
	stopWaiting chan struct{}
	outages     *outages
	held        atomic.Int64
}

// New builds a Queue. It does not touch Redis; Run migrates older layouts
// and starts the background work.
func New(rdb Redis, opts Options, logger *slog.Logger) (*Queue, error) {
	if opts.BucketSize < 1 {
		return nil, fmt.Errorf("bucket size must be at least 1, got %d", opts.BucketSize)
	}
	if strings.ContainsAny(opts.BucketName, "{}") {
		return nil, fmt.Errorf("bucket name %q: must not contain { or }: it becomes the partitions' hash tags", opts.BucketName)
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = defaults.KeyPrefix
	}
	if opts.ScanInterval <= 0 {
		opts.ScanInterval = time.Second
	}
	if opts.MoveBatch <= 0 {
		opts.MoveBatch = defaultMoveBatch
	}
	if opts.DeadMaxPerTopic <= 0 {
		opts.DeadMaxPerTopic = defaults.DeadMaxPerTopic
	}
	if opts.DeadTTL <= 0 {
		opts.DeadTTL = defaults.DeadTTL
	}
	if opts.WaitReplicas > 0 && opts.WaitTimeout <= 0 {
		opts.WaitTimeout = defaults.RedisWaitTimeout
	}
	if opts.MaxHeldPops <= 0 {
		opts.MaxHeldPops = defaults.MaxHeldPops
	}
	if opts.Observer == nil {
		opts.Observer = NopObserver{}
	}
	if opts.BlockTimeout <= 0 {
		opts.BlockTimeout = defaults.QueueBlockTimeout
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	keys, err := newKeySchema(opts)
	if err != nil {
		return nil, err
	}
	sc, err := loadScripts(opts.CheckKeys)
	if err != nil {
		return nil, err
	}
	var idBytes [6]byte
	if _, err := rand.Read(idBytes[:]); err != nil {
		return nil, fmt.Errorf("instance id: %w", err)
	}
	q := &Queue{
		rdb:         rdb,
		opts:        opts,
		log:         logger,
		keys:        keys,
		scripts:     sc,
		argvHeader:  scriptHeader(opts),
		instance:    hex.EncodeToString(idBytes[:]),
		obs:         opts.Observer,
		ready:       make(chan struct{}),
		stopWaiting: make(chan struct{}),
		outages:     newOutages(logger, opts.Cluster),
	}
	loops := loopsPerPartition(opts.BucketSize)
	q.waiters = newWaiterRegistry(loops)
	q.health = newLoopMonitor(logger, q.obs, time.Now, loopKinds(opts)...)
	tags, serverOfPartition := make([]string, opts.BucketSize), make([]string, opts.BucketSize)
	held := map[string]int{} // partitions per server
	for i := range tags {
		tags[i] = keys.partitionTag(i+1, opts.BucketSize)
		serverOfPartition[i] = serverOf(rdb, keys.partitionKeys(tags[i])[keyJobs])
		held[serverOfPartition[i]]++
	}
	servers := map[string]*serverLanes{}
	for i, tag := range tags {
		server := serverOfPartition[i]
		if servers[server] == nil {
			servers[server] = newServerLanes(singleSlotsFor(held[server]))
		}
		q.partitions = append(q.partitions, newPartition(q, i+1, tag, loops, servers[server]))
	}
	return q, nil
}

// singleSlotsFor is the single-call script calls of a kind in flight at
// once on a server holding that many partitions. Measured side by side
// (make bench-compare, 2026-12-03): on a 3-primary cluster with the
// default 12 partitions, 2 instead of 3 took the lifecycle's Redis CPU
// per job to 0.83 times (0.78-0.88 over 4 rounds) and raised push 1.2
// times; on one Redis with 3 partitions the two were within the rounds'
// noise of each other (wrk push 0.94-0.95 times, pop-finish 0.90-0.99).
func singleSlotsFor(partitions int) int {
	if partitions > singleSlots {
		return crowdedSingleSlots
	}
	return singleSlots
}

// serverLocator is a Redis that can say which server holds a key now: a
// cluster's primary for the key's slot.
type serverLocator interface {
	ServerOf(key string) string
}

// serverOf names the server holding key, as far as rdb tells: "" for one
// Redis. Partitions on one server share their script calls' slots (see
// lanes); after a change of a cluster's map they keep the slots they had.
func serverOf(rdb Redis, key string) string {
	if l, ok := rdb.(serverLocator); ok {
		return l.ServerOf(key)
	}
	return ""
}

// loopsPerPartition is the blocking dispatch loops each partition gets:
// about loopsPerPartitionTotal in all, and at least one each.
func loopsPerPartition(partitions int) int {
	return max(1, (loopsPerPartitionTotal+partitions-1)/partitions)
}

// Run migrates the jobs older layouts left (the original server's, and
// this server's before partitions), records the layout, then runs the
// scanners, the dispatch loops and the dead-letter sweeper until ctx is
// done. Until the migration is done, the job methods answer ErrStarting.
// It returns nil after a clean stop, and the error that stopped the
// migration otherwise.
func (q *Queue) Run(ctx context.Context) error {
	if err := q.prepare(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	q.readyOnce.Do(func() { close(q.ready) })
	var wg sync.WaitGroup
	for _, p := range q.partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.scanner.run(ctx)
		}()
		for _, l := range p.loops {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l.run(ctx)
			}()
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.sweepDeadLetters(ctx)
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		q.watchLayout(ctx)
	}()
	// Blocked loops would see ctx only when their BLPOP times out: wake
	// them, so a shutdown does not wait for it.
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		var interrupts sync.WaitGroup
		for _, p := range q.partitions {
			for _, l := range p.loops {
				interrupts.Add(1)
				go func() {
					defer interrupts.Done()
					if l.isBlocked() {
						l.sendInterrupt() // to see its context ended
					}
				}()
			}
		}
		interrupts.Wait()
	}()
	wg.Wait()
	return nil
}

// prepare loads the scripts and brings older layouts' jobs over.
func (q *Queue) prepare(ctx context.Context) error {
	for _, p := range q.partitions {
		if err := q.withConn(ctx, p.key(), q.ensureScriptsOn); err != nil {
			q.log.Warn("could not preload scripts; they will be sent on first use", "partition", p.tag, "err", err)
			break
		}
	}
	return q.migrate(ctx)
}

// Started is closed once Run has brought older layouts' jobs over and the
// engine serves.
func (q *Queue) Started() <-chan struct{} { return q.ready }

// StopWaiting answers every held Pop at once with no job, and makes later
// Pops return without holding. Called first on shutdown.
func (q *Queue) StopWaiting() {
	q.stopOnce.Do(func() { close(q.stopWaiting) })
}

// Partitions is the number of partitions the queue spreads jobs over.
func (q *Queue) Partitions() int { return len(q.partitions) }

// Ping checks that Redis answers, on every partition's server.
func (q *Queue) Ping(ctx context.Context) error {
	return q.eachPartition(ctx, func(p *partition) error {
		return q.withConn(ctx, p.key(), func(c redis.Conn) error {
			_, err := c.Do("PING")
			return err
		})
	})
}

// eachPartition runs f for every partition, at once, and returns the first
// error.
func (q *Queue) eachPartition(ctx context.Context, f func(p *partition) error) error {
	if len(q.partitions) == 1 {
		return f(q.partitions[0])
	}
	errs := make([]error, len(q.partitions))
	var wg sync.WaitGroup
	for i, p := range q.partitions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(p)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
