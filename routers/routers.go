// Package routers owns the HTTP layer of the delay-queue server: the five
// POST endpoints of ouqiang/delay-queue (/push, /pop, /finish, /delete, /get),
// the job lifecycle's (/release, /touch, /dead/list, /dead/kick,
// /dead/delete, /stats, /topics, /upcoming), the operational GET endpoints (/healthz,
// /readyz, /metrics), bearer-token auth, request decoding and validation,
// the {"code","message","data"} envelope and the mapping of every outcome
// to an HTTP status. It knows nothing of Redis: it talks to the engine
// through the Queue interface.
package routers

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/ui"
)

// Queue is the part of the engine the HTTP layer needs. *delayqueue.Queue
// satisfies it; tests use a fake.
type Queue interface {
	Push(ctx context.Context, job delayqueue.Job) (delayqueue.PushResult, error)
	PushBatch(ctx context.Context, jobs []delayqueue.Job) ([]delayqueue.PushResult, error)
	Pop(ctx context.Context, topics []string, hold time.Duration) (*delayqueue.Delivery, error)
	PopBatch(ctx context.Context, topics []string, count int, hold time.Duration) ([]*delayqueue.Delivery, error)
	Finish(ctx context.Context, id string) error
	FinishDelivery(ctx context.Context, id string, attempt int) (state string, err error)
	FinishBatch(ctx context.Context, ids []string) ([]delayqueue.RemoveStatus, error)
	Delete(ctx context.Context, id string) error
	DeleteBatch(ctx context.Context, ids []string) ([]delayqueue.RemoveStatus, error)
	Get(ctx context.Context, id string) (*delayqueue.JobInfo, error)

	Release(ctx context.Context, id string, delay *time.Duration, attempt int) (state string, due time.Time, err error)
	Touch(ctx context.Context, id string, attempt int) (state string, leaseUntil time.Time, err error)

	DeadList(ctx context.Context, topic string, offset, limit int) (jobs []delayqueue.JobInfo, total int, err error)
	DeadKick(ctx context.Context, topic, id string, count int) (kicked []string, err error)
	DeadDelete(ctx context.Context, topic, id string) (deleted int, err error)

	Stats(ctx context.Context, topic string) (map[string]delayqueue.TopicStats, error)
	Topics(ctx context.Context) ([]string, error)
	Upcoming(ctx context.Context, step time.Duration, n int) (time.Time, []int64, error)

	// Ready reports whether the engine can serve: Redis answers and holds
	// its scripts.
	Ready(ctx context.Context) error
	// LoopHealth reports the engine's background loops, for /readyz.
	LoopHealth() []delayqueue.LoopStatus
}

// DefaultReadyTimeout bounds GET /readyz's check when Options leave it
// zero.
const DefaultReadyTimeout = 2 * time.Second

// Options are the HTTP layer's limits and hooks. A zero or negative limit
// picks the default: the conf's (internal/defaults) for those it sets,
// DefaultReadyTimeout for ReadyTimeout.
type Options struct {
	// MaxBodyBytes limits a request body; a larger one is answered 413.
	MaxBodyBytes int64
	// ReadBodyTimeout bounds reading a request body, from when the
	// handler starts to read it; a slower one is answered 408. Zero means
	// no limit.
	ReadBodyTimeout time.Duration
	// WriteTimeout bounds writing an answer, from when the handler writes
	// it (under net/http; the fast path sets its own, the same). Zero means
	// no limit.
	WriteTimeout time.Duration
	// MaxJobBodyBytes limits the "body" string of a pushed job (code 1).
	MaxJobBodyBytes int
	// BlockTimeout is queue_block_timeout: the default and the longest hold
	// of a /pop, whose "timeout" may only shorten it.
	BlockTimeout time.Duration
	// MaxHeldPops is max_held_pops, named in the answer to a /pop the
	// engine refused because it holds too many; the engine enforces it.
	MaxHeldPops int
	// ReadyTimeout bounds the check behind GET /readyz.
	ReadyTimeout time.Duration

	// AuthToken, when not empty, must be sent by every API request (every
	// POST) as "Authorization: Bearer <token>"; others are answered 401.
	AuthToken string
	// Metrics, when not nil, serves GET /metrics. It is open unless
	// MetricsAuth (which needs AuthToken).
	Metrics     http.Handler
	MetricsAuth bool
	// AllowedHosts are the DNS names (allowed_hosts) by which a browser may
	// call the API without the token, besides IP literals and localhost.
	// Other clients are served by any name.
	AllowedHosts []string
	// UI, when not nil, serves static pages (the dashboard) under /ui and
	// /ui/, and the site's icon at /favicon.ico, for GET and HEAD, without
	// the token: the pages hold no data, and the API calls they make
	// carry it.
	UI http.Handler
	// ObserveRequest, when not nil, is called once per request when it is
	// answered, with the route's path ("unknown" for a path that has no
	// route, so the label values are bounded), the envelope code (for a
	// non-envelope answer, 1 when its status is neither 200 nor 304) and
	// the duration.
	ObserveRequest func(endpoint string, code int, d time.Duration)
}

func (o Options) withDefaults() Options {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = defaults.MaxBodyBytes
	}
	if o.MaxJobBodyBytes <= 0 {
		o.MaxJobBodyBytes = defaults.MaxJobBodyBytes
	}
	if o.BlockTimeout <= 0 {
		o.BlockTimeout = defaults.QueueBlockTimeout
	}
	if o.MaxHeldPops <= 0 {
		o.MaxHeldPops = defaults.MaxHeldPops
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = DefaultReadyTimeout
	}
	return o
}

// Log attribute keys, shared with the engine's logs.
const (
	logKeyTopic = "topic"
	logKeyJobID = "job_id"
	logKeyErr   = "err"
)

// unknownEndpoint is the endpoint label of a request to a path with no route.
const unknownEndpoint = "unknown"

// handler serves the endpoints. Its methods are the routes.
type handler struct {
	queue  Queue
	opts   Options
	logger *slog.Logger
	// auth checks bearer tokens; nil when no token is configured.
	auth *tokenChecker
	// hosts are the Host values browsers may use without the token.
	hosts hostAllowList
	// endpoints names the API routes, for the answer to an unknown path.
	endpoints string
	// methodOf maps every routed path to its method, for the endpoint
	// label and the Allow header of requests answered before the mux
	// (cross-origin, CONNECT).
	methodOf map[string]string
}

// access says who may use a route.
type access int

const (
	// accessToken routes need the bearer token when one is configured,
	// and from a browser without it a known Host (requireKnownHost):
	// every API endpoint.
	accessToken access = iota
	// accessOpen routes never need it: health checks, and static pages
	// (such as a dashboard) that must load in a browser before it has the
	// token; the API calls such pages make carry it. Browsers reach them
	// by any name: a page must load before it can ask for the token, and a
	// same-origin GET from a rebinding page on http:// carries neither
	// Origin nor Sec-Fetch-Site, so a Host check would not stop it anyway.
	accessOpen
)

// route is one endpoint: its method (POST for the API, GET for the rest,
// which also answers HEAD), path, handler and access.
type route struct {
	method string
	path   string
	handle http.HandlerFunc
	access access
	// quiet routes (probes and scrapes, called every few seconds) log
	// their successes at debug rather than info.
	quiet bool
	// raw routes answer in their own format, not an envelope.
	raw bool
}

// JobPaths returns the paths of the job endpoints, the hot path a server
// may serve with a leaner HTTP stack (see internal/http1). A true value
// marks an endpoint whose requests can hold (a /pop waiting for jobs), so
// that a client leaving must cancel them.
func JobPaths() map[string]bool {
	return map[string]bool{
		"/push": false, "/pop": true, "/finish": false, "/delete": false,
		"/get": false, "/release": false, "/touch": false,
	}
}

// New returns the server's HTTP handler. Every answer, including unknown
// paths, wrong methods, refused tokens, oversized bodies and panics, is a
// JSON envelope; only /metrics answers in the Prometheus text format.
func New(q Queue, opts Options, logger *slog.Logger) http.Handler {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{queue: q, opts: opts.withDefaults(), logger: logger, methodOf: make(map[string]string)}
	if h.opts.AuthToken != "" {
		h.auth = newTokenChecker(h.opts.AuthToken)
	}
	h.hosts = newHostAllowList(h.opts.AllowedHosts)

	api := []route{
		{method: http.MethodPost, path: "/push", handle: h.push},
		{method: http.MethodPost, path: "/pop", handle: h.pop},
		{method: http.MethodPost, path: "/finish", handle: h.finish},
		{method: http.MethodPost, path: "/delete", handle: h.delete},
		{method: http.MethodPost, path: "/get", handle: h.get},
		{method: http.MethodPost, path: "/release", handle: h.release},
		{method: http.MethodPost, path: "/touch", handle: h.touch},
		{method: http.MethodPost, path: "/dead/list", handle: h.deadList},
		{method: http.MethodPost, path: "/dead/kick", handle: h.deadKick},
		{method: http.MethodPost, path: "/dead/delete", handle: h.deadDelete},
		{method: http.MethodPost, path: "/stats", handle: h.stats},
		{method: http.MethodPost, path: "/topics", handle: h.topics},
		{method: http.MethodPost, path: "/upcoming", handle: h.upcoming},
	}
	paths := make([]string, len(api))
	for i, rt := range api {
		paths[i] = rt.path
	}
	h.endpoints = strings.Join(paths[:len(paths)-1], ", ") + " and " + paths[len(paths)-1]

	routes := append(api,
		route{method: http.MethodGet, path: "/", handle: h.root, access: accessOpen},
		route{method: http.MethodGet, path: "/healthz", handle: h.healthz, access: accessOpen, quiet: true},
		route{method: http.MethodGet, path: "/readyz", handle: h.readyz, access: accessOpen, quiet: true},
	)
	if h.opts.Metrics != nil {
		metricsAccess := accessOpen
		if h.opts.MetricsAuth {
			metricsAccess = accessToken
		}
		routes = append(routes, route{method: http.MethodGet, path: "/metrics", handle: h.opts.Metrics.ServeHTTP,
			access: metricsAccess, quiet: true, raw: true})
	}
	if h.opts.UI != nil {
		// "/ui/" matches every path below it; "/ui" alone is the UI's to
		// redirect.
		for _, path := range []string{ui.Prefix, ui.Prefix + "/"} {
			routes = append(routes, route{method: http.MethodGet, path: path, handle: h.opts.UI.ServeHTTP,
				access: accessOpen, raw: true})
		}
		// Browsers ask for it on their own, on any page of the server.
		routes = append(routes, route{method: http.MethodGet, path: ui.IconPath, handle: h.opts.UI.ServeHTTP,
			access: accessOpen, raw: true, quiet: true})
	}

	mux := http.NewServeMux()
	for _, rt := range routes {
		h.methodOf[rt.path] = rt.method
		handle := rt.handle
		if rt.raw {
			handle = recordRawAnswer(handle)
		}
		if rt.access == accessToken {
			// With a token, a page without it gets 401 and can ask for
			// it, and a page with it may use any Host; without one, a
			// browser must use a known Host.
			if h.auth != nil {
				handle = h.requireToken(handle)
			} else {
				handle = h.requireKnownHost(handle)
			}
		}
		if rt.path == "/" {
			// "/" alone ("/" would match every path); other methods on it
			// are an unknown path, as they always were.
			mux.HandleFunc(rt.method+" /{$}", h.named(rt, handle))
			continue
		}
		mux.HandleFunc(rt.method+" "+rt.path, h.named(rt, handle))
		// The method-less pattern is less specific, so it only catches the
		// other methods; without it the mux would answer 405 in plain text.
		mux.HandleFunc(rt.path, h.named(rt, h.methodNotAllowed(rt.method)))
	}
	mux.HandleFunc("/", h.notFound)

	// The outer layers answer before the mux could write anything of its
	// own (plain-text 404/405 or redirects).
	return h.logRequests(h.recoverPanics(h.rejectCrossOrigin(h.rejectUnroutable(mux))))
}

// named records the route a request reached, for the request log and the
// metrics.
func (h *handler) named(rt route, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rec := recordOf(r)
		rec.endpoint = rt.path
		rec.quiet = rt.quiet
		next(w, r)
	}
}
