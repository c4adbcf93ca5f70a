// Package metrics owns the server's Prometheus metrics: it observes the
// engine's events (delayqueue.Observer), samples the per-topic job counts,
// counts HTTP requests, and serves /metrics on a registry of its own.
package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/redisconn"
)

// OtherTopic is the label of every topic beyond the cap on topic labels.
const OtherTopic = "other"

// Options configure Metrics.
type Options struct {
	// MaxTopicLabels caps the distinct topic label values; later topics are
	// counted under "other". 0 means defaults.MetricsTopicLabels.
	MaxTopicLabels int
	// SampleInterval is how often the per-topic job counts are read from
	// Redis. 0 means 15s.
	SampleInterval time.Duration
}

// Metrics holds the collectors. It implements delayqueue.Observer.
type Metrics struct {
	registry *prometheus.Registry
	opts     Options
	log      *slog.Logger

	mu     sync.Mutex
	topics map[string]struct{}

	requests       *prometheus.CounterVec
	latency        *prometheus.HistogramVec
	jobs           *prometheus.CounterVec
	leaseExpired   *prometheus.CounterVec
	jobsByState    *prometheus.GaugeVec
	scanLag        prometheus.Gauge
	scanLagHist    prometheus.Histogram
	redisErrors    prometheus.Counter
	loopErrors     *prometheus.CounterVec
	deadDropped    *prometheus.GaugeVec
	deadDroppedAll prometheus.Gauge
	redirects      *prometheus.CounterVec
	mapRefreshes   *prometheus.CounterVec
	webhookCalls   *prometheus.CounterVec
	webhookTiming  prometheus.Histogram
}

// New registers every collector on a new registry.
func New(opts Options, logger *slog.Logger) *Metrics {
	if opts.MaxTopicLabels <= 0 {
		opts.MaxTopicLabels = defaults.MetricsTopicLabels
	}
	if opts.SampleInterval <= 0 {
		opts.SampleInterval = 15 * time.Second
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		opts:     opts,
		log:      logger,
		topics:   make(map[string]struct{}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delayqueue_http_requests_total",
			Help: "HTTP requests by endpoint and result (ok: code 0, error: code 1).",
		}, []string{"endpoint", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "delayqueue_http_request_duration_seconds",
			Help:    "HTTP request latency by endpoint and result; /pop includes its hold.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 5, 30, 180},
		}, []string{"endpoint", "result"}),
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delayqueue_jobs_total",
			Help: "Jobs by event (pushed, delivered, redelivered, finished, deleted, dead_lettered) and topic, in this process.",
		}, []string{"event", "topic"}),
		leaseExpired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delayqueue_lease_expired_total",
			Help: "Deliveries that ended because ttr ran out, by topic.",
		}, []string{"topic"}),
		jobsByState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delayqueue_jobs",
			Help: "Jobs by topic and state (delay, ready, reserved, dead), sampled from Redis (shared by every instance).",
		}, []string{"topic", "state"}),
		scanLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delayqueue_scanner_lag_seconds",
			Help: "Now minus the due time of the oldest due job a scan found not yet moved (last scan that moved any).",
		}),
		scanLagHist: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delayqueue_scanner_lag_distribution_seconds",
			Help:    "Distribution of the scanner lag over scans that moved jobs.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}),
		redisErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "delayqueue_redis_errors_total",
			Help: "Failures to talk to Redis.",
		}),
		loopErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delayqueue_loop_errors_total",
			Help: "Failed rounds of the background loops (scanner, dispatcher, dead-sweeper), connection errors included.",
		}, []string{"loop"}),
		deadDropped: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "delayqueue_dead_letters_dropped",
			Help: "Dead letters dropped over dead_max_per_topic or past dead_ttl, by topic, while the topic has dead letters (sampled from Redis, shared by every instance).",
		}, []string{"topic"}),
		deadDroppedAll: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "delayqueue_dead_letters_dropped_all",
			Help: "Dead letters dropped over dead_max_per_topic or past dead_ttl, of every topic (those since gone included), since the counters began (sampled from Redis, shared by every instance).",
		}),
		redirects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delayqueue_redis_redirects_total",
			Help: "Redis Cluster redirects met by this process's calls, by kind (moved, ask, tryagain, clusterdown); each is followed.",
		}, []string{"kind"}),
		mapRefreshes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delayqueue_redis_map_refreshes_total",
			Help: "Fetches of the Redis Cluster slot map, by result (ok, error).",
		}, []string{"result"}),
		webhookCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "delayqueue_webhook_calls_total",
			Help: "Webhook calls by result class (2xx, 3xx, 4xx, 5xx, timeout, connection_error, refused).",
		}, []string{"result"}),
		webhookTiming: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "delayqueue_webhook_call_duration_seconds",
			Help:    "Webhook call latency.",
			Buckets: prometheus.DefBuckets,
		}),
	}
	m.registry.MustRegister(m.requests, m.latency, m.jobs, m.leaseExpired, m.jobsByState, m.deadDropped, m.deadDroppedAll, m.scanLag, m.scanLagHist,
		m.redisErrors, m.loopErrors, m.redirects, m.mapRefreshes, m.webhookCalls, m.webhookTiming,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Present at 0, for rate().
	for _, kind := range []string{redisconn.RedirectMoved, redisconn.RedirectAsk, redisconn.RedirectTryAgain, redisconn.RedirectClusterDown} {
		m.redirects.WithLabelValues(kind)
	}
	return m
}

// Registry is the registry /metrics serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.registry }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{ErrorLog: slogErrorLog{m.log}})
}

type slogErrorLog struct{ log *slog.Logger }

func (l slogErrorLog) Println(v ...any) { l.log.Warn("metrics", "err", v) }

// topic returns the label for topic: itself while fewer than
// MaxTopicLabels topics have been seen, "other" beyond.
func (m *Metrics) topic(topic string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.topics[topic]; ok {
		return topic
	}
	if len(m.topics) >= m.opts.MaxTopicLabels {
		return OtherTopic
	}
	m.topics[topic] = struct{}{}
	return topic
}

// WatchQueue adds the gauges read from a queue: held pops and the health of
// its background loops now and, every SampleInterval until ctx ends, the
// jobs per topic and state. The returned channel is closed when sampling
// has stopped: wait for it before closing the queue's pool.
func (m *Metrics) WatchQueue(ctx context.Context, q *delayqueue.Queue) <-chan struct{} {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "delayqueue_held_pops",
		Help: "Pops this process holds waiting for a job.",
	}, func() float64 { return float64(q.HeldPops()) }))
	for _, s := range q.LoopHealth() {
		m.loopErrors.WithLabelValues(s.Loop) // present at 0, for rate()
	}
	m.registry.MustRegister(newLoopHealthCollector(q))
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(m.opts.SampleInterval)
		defer ticker.Stop()
		for {
			m.sample(ctx, q)
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
		}
	}()
	return done
}

func (m *Metrics) sample(ctx context.Context, q *delayqueue.Queue) {
	stats, err := q.Stats(ctx, "")
	if err != nil {
		return
	}
	sums := map[string]delayqueue.TopicStats{}
	for t, s := range stats {
		label := m.topic(t)
		sum := sums[label]
		sum.Delay += s.Delay
		sum.Ready += s.Ready
		sum.Reserved += s.Reserved
		sum.Dead += s.Dead
		sums[label] = sum
	}
	m.jobsByState.Reset()
	for label, s := range sums {
		m.jobsByState.WithLabelValues(label, delayqueue.StateDelay).Set(float64(s.Delay))
		m.jobsByState.WithLabelValues(label, delayqueue.StateReady).Set(float64(s.Ready))
		m.jobsByState.WithLabelValues(label, delayqueue.StateReserved).Set(float64(s.Reserved))
		m.jobsByState.WithLabelValues(label, delayqueue.StateDead).Set(float64(s.Dead))
	}
	dropped, total, err := q.DeadDropped(ctx)
	if err != nil {
		return
	}
	byLabel := map[string]int64{}
	for t, n := range dropped {
		byLabel[m.topic(t)] += n
	}
	m.deadDropped.Reset()
	for label, n := range byLabel {
		m.deadDropped.WithLabelValues(label).Set(float64(n))
	}
	m.deadDroppedAll.Set(float64(total))
}

// WatchPool adds gauges of the Redis pools' connections, read from stats
// (summed over a cluster's primaries).
func (m *Metrics) WatchPool(stats func() redis.PoolStats) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "delayqueue_redis_pool_in_use",
		Help: "Redis pool connections in use (not idle), summed over a cluster's primaries; the dispatch loops hold a few more of their own.",
	}, func() float64 {
		s := stats()
		return float64(s.ActiveCount - s.IdleCount)
	}))
}

// Redirect counts a Redis Cluster redirect a call met (kind: moved, ask,
// tryagain, clusterdown); it makes Metrics a redisconn.Observer.
func (m *Metrics) Redirect(kind string) { m.redirects.WithLabelValues(kind).Inc() }

// MapRefresh counts a fetch of a Redis Cluster's slot map, and whether it
// succeeded.
func (m *Metrics) MapRefresh(ok bool) {
	result := "ok"
	if !ok {
		result = "error"
	}
	m.mapRefreshes.WithLabelValues(result).Inc()
}

// ObserveRequest counts one HTTP request.
func (m *Metrics) ObserveRequest(endpoint string, code int, d time.Duration) {
	result := "ok"
	if code != 0 {
		result = "error"
	}
	m.requests.WithLabelValues(endpoint, result).Inc()
	m.latency.WithLabelValues(endpoint, result).Observe(d.Seconds())
}

// ObserveWebhookCall counts one webhook call by result class.
func (m *Metrics) ObserveWebhookCall(result string, d time.Duration) {
	m.webhookCalls.WithLabelValues(result).Inc()
	m.webhookTiming.Observe(d.Seconds())
}

// StatusClass is "2xx" for 204 and so on.
func StatusClass(status int) string { return strconv.Itoa(status/100) + "xx" }

func (m *Metrics) JobsPushed(topic string, n int) {
	m.jobs.WithLabelValues("pushed", m.topic(topic)).Add(float64(n))
}

func (m *Metrics) JobDelivered(topic string, attempts int) {
	label := m.topic(topic)
	m.jobs.WithLabelValues("delivered", label).Inc()
	if attempts > 1 {
		m.jobs.WithLabelValues("redelivered", label).Inc()
	}
}

func (m *Metrics) JobsFinished(topic string, n int) {
	m.jobs.WithLabelValues("finished", m.topic(topic)).Add(float64(n))
}

func (m *Metrics) JobsDeleted(topic string, n int) {
	m.jobs.WithLabelValues("deleted", m.topic(topic)).Add(float64(n))
}

func (m *Metrics) JobsDeadLettered(topic string, n int) {
	m.jobs.WithLabelValues("dead_lettered", m.topic(topic)).Add(float64(n))
}

func (m *Metrics) LeaseExpired(topic string) { m.leaseExpired.WithLabelValues(m.topic(topic)).Inc() }

func (m *Metrics) ScanLag(lag time.Duration) {
	m.scanLag.Set(lag.Seconds())
	m.scanLagHist.Observe(lag.Seconds())
}

func (m *Metrics) RedisError() { m.redisErrors.Inc() }

func (m *Metrics) LoopError(loop string) { m.loopErrors.WithLabelValues(loop).Inc() }

// loopHealthCollector reads the health of a queue's background loops at
// each scrape.
type loopHealthCollector struct {
	q             *delayqueue.Queue
	behind, stale *prometheus.Desc
}

func newLoopHealthCollector(q *delayqueue.Queue) loopHealthCollector {
	return loopHealthCollector{
		q: q,
		behind: prometheus.NewDesc("delayqueue_loop_last_round_age_seconds",
			"How long the most behind goroutine of each background loop has gone without completing a round (0 while it waits for work).",
			[]string{"loop"}, nil),
		stale: prometheus.NewDesc("delayqueue_loop_stale",
			"1 when a background loop has gone without a completed round for longer than it should (as GET /readyz reports), else 0.",
			[]string{"loop"}, nil),
	}
}

func (c loopHealthCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.behind
	ch <- c.stale
}

func (c loopHealthCollector) Collect(ch chan<- prometheus.Metric) {
	for _, s := range c.q.LoopHealth() {
		stale := 0.0
		if s.Stale() {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(c.behind, prometheus.GaugeValue, s.Behind.Seconds(), s.Loop)
		ch <- prometheus.MustNewConstMetric(c.stale, prometheus.GaugeValue, stale, s.Loop)
	}
}

var _ delayqueue.Observer = (*Metrics)(nil)
