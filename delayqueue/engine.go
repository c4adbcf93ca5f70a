package delayqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

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
}

const (
	defaultKeyPrefix   = "dq_"
	defaultDispatchers = 4
	defaultMoveBatch   = 500
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
	pool     *redis.Pool
	opts     Options
	log      *slog.Logger
	keys     keySchema
	scripts  scripts
	instance string

	scanners []*scanner
	waiters  *waiterRegistry
	loops    []*dispatchLoop

	stopOnce    sync.Once
	stopWaiting chan struct{}
	redisDown   atomic.Bool
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
		instance:    hex.EncodeToString(idBytes[:]),
		stopWaiting: make(chan struct{}),
	}
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
	for _, l := range q.loops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.run(ctx)
		}()
	}
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
		if errors.Is(err, ErrInvalidJob) || errors.Is(err, context.Canceled) {
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
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "BUSY", "TRYAGAIN", "CLUSTERDOWN"} {
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
	if q.redisDown.CompareAndSwap(false, true) {
		q.log.Error("redis is unreachable", "err", err)
	}
}

func validateJob(job Job) error {
	switch {
	case job.Topic == "" || len(job.Topic) > MaxTopicBytes || !utf8.ValidString(job.Topic):
		return fmt.Errorf("%w: topic must be 1 to %d bytes of UTF-8", ErrInvalidJob, MaxTopicBytes)
	case job.ID == "" || len(job.ID) > MaxIDBytes || !utf8.ValidString(job.ID):
		return fmt.Errorf("%w: id must be 1 to %d bytes of UTF-8", ErrInvalidJob, MaxIDBytes)
	case job.Delay < 0 || job.Delay > MaxDelay:
		return fmt.Errorf("%w: delay must be between 0 and %d seconds", ErrInvalidJob, int64(MaxDelay/time.Second))
	case job.TTR < time.Second || job.TTR > MaxTTR:
		return fmt.Errorf("%w: ttr must be between 1 and %d seconds", ErrInvalidJob, int64(MaxTTR/time.Second))
	}
	return nil
}

// Push stores a job, or replaces the job with the same id in whatever state
// it is: its old schedule, lease and delivery count are dropped.
func (q *Queue) Push(ctx context.Context, job Job) error {
	if err := validateJob(job); err != nil {
		return err
	}
	bucketNo := q.keys.bucketNumber(job.ID)
	var reply []int64
	err := q.withConn(ctx, func(c redis.Conn) error {
		var err error
		reply, err = redis.Int64s(q.scripts.push.Do(c,
			q.keys.job(job.ID), q.keys.bucket(bucketNo), q.keys.ready(job.Topic), q.keys.wake(job.Topic),
			job.ID, job.Topic, job.Delay.Milliseconds(), int64(job.TTR/time.Second), job.Body,
			bucketNo, q.keys.bucketPrefix, q.keys.bucketSuffix, wakeTokenCap))
		return err
	})
	if err != nil {
		return fmt.Errorf("push %s: %w", job.ID, err)
	}
	if job.Delay > 0 && len(reply) >= 2 {
		q.scanners[bucketNo-1].wakeBy(time.Now().Add(time.Duration(reply[0]-reply[1]) * time.Millisecond))
	}
	return nil
}

// Finish removes a job for good: no more deliveries. An unknown id is not
// an error.
func (q *Queue) Finish(ctx context.Context, id string) error {
	return q.removeJob(ctx, "finish", q.scripts.finish, id)
}

// Delete removes a job in any state. An unknown id is not an error.
func (q *Queue) Delete(ctx context.Context, id string) error {
	return q.removeJob(ctx, "delete", q.scripts.remove, id)
}

func (q *Queue) removeJob(ctx context.Context, op string, script *redis.Script, id string) error {
	if id == "" {
		return fmt.Errorf("%s: %w: id is empty", op, ErrInvalidJob)
	}
	err := q.withConn(ctx, func(c redis.Conn) error {
		_, err := script.Do(c, q.keys.job(id), id, q.keys.bucketPrefix, q.keys.bucketSuffix)
		return err
	})
	if err != nil {
		return fmt.Errorf("%s %s: %w", op, id, err)
	}
	return nil
}

// Get returns the stored view of a job, or nil when there is no such job.
func (q *Queue) Get(ctx context.Context, id string) (*JobInfo, error) {
	var fields map[string]string
	err := q.withConn(ctx, func(c redis.Conn) error {
		var err error
		fields, err = redis.StringMap(c.Do("HGETALL", q.keys.job(id)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", id, err)
	}
	if len(fields) == 0 {
		return nil, nil
	}
	info := &JobInfo{
		ID:        id,
		Topic:     fields["t"],
		State:     fields["s"],
		TTR:       time.Duration(atoi(fields["r"])) * time.Second,
		Attempts:  int(atoi(fields["a"])),
		DueAt:     time.UnixMilli(atoi(fields["d"])),
		CreatedAt: time.UnixMilli(atoi(fields["c"])),
		Body:      bodyFromFields(fields),
	}
	if l, ok := fields["l"]; ok {
		info.LeaseUntil = time.UnixMilli(atoi(l))
	}
	return info, nil
}

// bodyFromFields reassembles a body stored by the scripts' write_body.
func bodyFromFields(fields map[string]string) string {
	n := atoi(fields["n"])
	if n < 0 {
		return fields["b"]
	}
	var body []byte
	for i := int64(1); i <= n; i++ {
		body = append(body, fields["b"+strconv.FormatInt(i, 10)]...)
	}
	return string(body)
}

func atoi(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Numbers written by Lua may come back in float notation.
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return 0
		}
		return int64(f)
	}
	return n
}
