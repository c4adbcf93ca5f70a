// Package routers owns the HTTP layer of the delay-queue server: the five
// POST endpoints of ouqiang/delay-queue (/push, /pop, /finish, /delete, /get),
// the job lifecycle's (/release, /touch, /dead/list, /dead/kick,
// /dead/delete, /stats, /topics), request decoding and validation, the {"code","message","data"} envelope
// and the mapping of every outcome to an HTTP status. It knows nothing of
// Redis: it talks to the engine through the Queue interface.
package routers

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
)

// Queue is the part of the engine the HTTP layer needs. *delayqueue.Queue
// satisfies it; tests use a fake.
type Queue interface {
	Push(ctx context.Context, job delayqueue.Job) (delayqueue.PushResult, error)
	PushBatch(ctx context.Context, jobs []delayqueue.Job) ([]delayqueue.PushResult, error)
	Pop(ctx context.Context, topics []string, hold time.Duration) (*delayqueue.Delivery, error)
	PopBatch(ctx context.Context, topics []string, count int, hold time.Duration) ([]*delayqueue.Delivery, error)
	Finish(ctx context.Context, id string) error
	FinishBatch(ctx context.Context, ids []string) (dead []string, err error)
	Delete(ctx context.Context, id string) error
	DeleteBatch(ctx context.Context, ids []string) (int, error)
	Get(ctx context.Context, id string) (*delayqueue.JobInfo, error)

	Release(ctx context.Context, id string, delay *time.Duration, attempt int) (state string, due time.Time, err error)
	Touch(ctx context.Context, id string, attempt int) (leaseUntil time.Time, err error)

	DeadList(ctx context.Context, topic string, offset, limit int) (jobs []delayqueue.JobInfo, total int, err error)
	DeadKick(ctx context.Context, topic, id string, count int) (kicked []string, err error)
	DeadDelete(ctx context.Context, topic, id string) (deleted int, err error)

	Stats(ctx context.Context, topic string) (map[string]delayqueue.TopicStats, error)
	Topics(ctx context.Context) ([]string, error)
}

// Defaults used for the zero values of Options.
const (
	DefaultMaxBodyBytes    int64         = 16 << 20 // max_body_bytes: batches fit
	DefaultMaxJobBodyBytes int           = 1 << 20  // max_job_body_bytes
	DefaultBlockTimeout    time.Duration = 178 * time.Second
)

// Options are the HTTP layer's limits. A zero or negative value picks the
// default.
type Options struct {
	// MaxBodyBytes limits a request body; a larger one is answered 413.
	MaxBodyBytes int64
	// MaxJobBodyBytes limits the "body" string of a pushed job (code 1).
	MaxJobBodyBytes int
	// BlockTimeout is queue_block_timeout: the default and the longest hold
	// of a /pop, whose "timeout" may only shorten it.
	BlockTimeout time.Duration
}

func (o Options) withDefaults() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if o.MaxJobBodyBytes <= 0 {
		o.MaxJobBodyBytes = DefaultMaxJobBodyBytes
	}
	if o.BlockTimeout <= 0 {
		o.BlockTimeout = DefaultBlockTimeout
	}
	return o
}

// Log attribute keys, shared with the engine's logs.
const (
	logKeyTopic = "topic"
	logKeyJobID = "job_id"
	logKeyErr   = "err"
)

// handler serves the endpoints. Its methods are the routes.
type handler struct {
	queue  Queue
	opts   Options
	logger *slog.Logger
	// endpoints names the routes, for the answer to an unknown path.
	endpoints string
}

// New returns the server's HTTP handler. Every answer, including unknown
// paths, wrong methods, oversized bodies and panics, is a JSON envelope.
func New(q Queue, opts Options, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{queue: q, opts: opts.withDefaults(), logger: logger}

	mux := http.NewServeMux()
	routes := []struct {
		path   string
		handle http.HandlerFunc
	}{
		{"/push", h.push},
		{"/pop", h.pop},
		{"/finish", h.finish},
		{"/delete", h.delete},
		{"/get", h.get},
		{"/release", h.release},
		{"/touch", h.touch},
		{"/dead/list", h.deadList},
		{"/dead/kick", h.deadKick},
		{"/dead/delete", h.deadDelete},
		{"/stats", h.stats},
		{"/topics", h.topics},
	}
	paths := make([]string, len(routes))
	for i, route := range routes {
		paths[i] = route.path
		mux.HandleFunc("POST "+route.path, route.handle)
		// The method-less pattern is less specific, so it only catches the
		// other methods; without it the mux would answer 405 in plain text.
		mux.HandleFunc(route.path, h.methodNotAllowed)
	}
	h.endpoints = strings.Join(paths[:len(paths)-1], ", ") + " and " + paths[len(paths)-1]
	mux.HandleFunc("/", h.notFound)

	// The outer layers answer before the mux could write anything of its
	// own (plain-text 404/405 or redirects).
	return h.logRequests(h.recoverPanics(h.rejectCrossOrigin(h.rejectUnroutable(mux))))
}
