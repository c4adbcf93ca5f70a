// Package routers owns the HTTP layer of the delay-queue server: the five
// POST endpoints of ouqiang/delay-queue (/push, /pop, /finish, /delete, /get),
// request decoding and validation, the {"code","message","data"} envelope
// and the mapping of every outcome to an HTTP status. It knows nothing of
// Redis: it talks to the engine through the Queue interface.
package routers

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
)

// Queue is the part of the engine the HTTP layer needs. *delayqueue.Queue
// satisfies it; tests use a fake.
type Queue interface {
	Push(ctx context.Context, job delayqueue.Job) (delayqueue.PushResult, error)
	Pop(ctx context.Context, topics []string, hold time.Duration) (*delayqueue.Delivery, error)
	Finish(ctx context.Context, id string) error
	Delete(ctx context.Context, id string) error
	Get(ctx context.Context, id string) (*delayqueue.JobInfo, error)
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
	}
	for _, route := range routes {
		mux.HandleFunc("POST "+route.path, route.handle)
		// The method-less pattern is less specific, so it only catches the
		// other methods; without it the mux would answer 405 in plain text.
		mux.HandleFunc(route.path, h.methodNotAllowed)
	}
	mux.HandleFunc("/", h.notFound)

	// The outer layers answer before the mux could write anything of its
	// own (plain-text 404/405 or redirects).
	return h.logRequests(h.recoverPanics(h.rejectCrossOrigin(h.rejectUnroutable(mux))))
}
