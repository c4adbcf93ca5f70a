package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/config"
	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/http1"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/metrics"
	"github.com/delay-queue/delay-queue/routers"
	"github.com/delay-queue/delay-queue/ui"
	"github.com/delay-queue/delay-queue/webhook"
)

// server is the running program: the Redis client, the engine, the webhook
// dispatcher and the HTTP server, wired from the config. newServer builds
// every part (and fails before anything runs); run starts them in order
// and stops them in reverse order.
type server struct {
	cfg    config.Config
	log    *slog.Logger
	target string // the Redis the server uses, for errors and the log

	mini     *miniredis.Miniredis // the embedded Redis, or nil
	redis    *redisconn.Client
	observer *metrics.Metrics
	queue    *delayqueue.Queue
	hooks    *webhook.Dispatcher
	http     httpServer
	listener net.Listener
	// stopDebug stops the debug_addr listener, when there is one.
	stopDebug func()
}

// httpServer is the HTTP server as run drives it: an *http.Server, or an
// *http1.Server in front of one (http_fast_path).
type httpServer interface {
	Serve(l net.Listener) error
	Shutdown(ctx context.Context) error
	Close() error
}

// redisOptions are the redis.* settings as the connection package takes
// them.
func redisOptions(cfg config.Config) (redisconn.Options, error) {
	r := cfg.Redis
	opts := redisconn.Options{
		Addr:           r.Host,
		DB:             r.DB,
		Username:       r.Username,
		Password:       r.Password,
		TLS:            r.TLS,
		SentinelAddrs:  r.SentinelAddrs,
		MasterName:     r.MasterName,
		ClusterAddrs:   r.ClusterAddrs,
		MaxIdle:        r.MaxIdle,
		MaxActive:      r.MaxActive,
		ConnectTimeout: r.ConnectTimeout,
		ReadTimeout:    r.ReadTimeout,
		WriteTimeout:   r.WriteTimeout,
	}
	if r.TLS {
		tlsConfig, err := redisconn.NewTLSConfig(r.TLSCAFile, r.TLSServerName)
		if err != nil {
			return opts, fmt.Errorf("redis.tls_ca_file: %w", err)
		}
		opts.TLSConfig = tlsConfig
	}
	return opts, nil
}

// describeRedis names the Redis opts reach, for errors and the log.
func describeRedis(opts redisconn.Options) string {
	switch {
	case len(opts.ClusterAddrs) > 0:
		return "cluster via " + strings.Join(opts.ClusterAddrs, ",")
	case len(opts.SentinelAddrs) > 0:
		return fmt.Sprintf("sentinel master %q via %s", opts.MasterName, strings.Join(opts.SentinelAddrs, ","))
	}
	return opts.Addr
}

// newServer builds the server: it connects to Redis and checks it, reads
// the partition count the data was written with, and builds the engine, the
// webhook dispatcher and the HTTP server. On error, what it opened is
// closed.
func newServer(ctx context.Context, cfg config.Config, logger *slog.Logger) (*server, error) {
	s := &server{cfg: cfg, log: logger}
	s.observer = metrics.New(metrics.Options{MaxTopicLabels: cfg.MetricsTopicLabels}, logger)
	for _, build := range []func() error{
		func() error { return s.connect(ctx) },
		func() error { return s.buildQueue(ctx) },
		s.buildHooks,
	} {
		if err := build(); err != nil {
			s.close()
			return nil, err
		}
	}
	s.buildHTTP()
	return s, nil
}

// connect opens the Redis client (starting the embedded Redis first when
// asked) and checks that Redis answers and is new enough.
func (s *server) connect(ctx context.Context) error {
	opts, err := redisOptions(s.cfg)
	if err != nil {
		return err
	}
	if s.cfg.Redis.Embedded() {
		s.mini = miniredis.NewMiniRedis()
		if err := s.mini.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("start embedded redis: %w", err)
		}
		// miniredis has no password unless told; the conf's is meant for
		// the real server, like its ACL user, TLS, Sentinel and cluster
		// settings.
		opts = redisconn.Options{Addr: s.mini.Addr(), DB: opts.DB, MaxIdle: opts.MaxIdle, MaxActive: opts.MaxActive,
			ConnectTimeout: opts.ConnectTimeout, ReadTimeout: opts.ReadTimeout, WriteTimeout: opts.WriteTimeout}
		s.log.Warn("embedded redis: jobs live in this process's memory only and are lost when it exits",
			"redis_addr", opts.Addr)
	}
	s.target = describeRedis(opts)
	// The offline -repartition has no metrics: its nil *metrics.Metrics
	// must reach redisconn as a nil Observer, which it replaces with one
	// that does nothing, not as an interface holding a nil pointer.
	var observer redisconn.Observer
	if s.observer != nil {
		observer = s.observer
	}
	if s.redis, err = redisconn.New(opts, s.log, observer); err != nil {
		return fmt.Errorf("redis (%s): %w", s.target, err)
	}
	if err := s.checkRedis(ctx); err != nil {
		// The connection's errors usually name the address already.
		if !s.redis.Cluster() && len(opts.SentinelAddrs) == 0 && strings.Contains(err.Error(), opts.Addr) {
			return fmt.Errorf("start-up check of redis.host: %w", err)
		}
		return fmt.Errorf("start-up check of redis (%s): %w", s.target, err)
	}
	return nil
}

// checkRedis makes sure Redis answers before anything starts. A real server
// must also be new enough; miniredis does not report redis_version in INFO
// (it rejects INFO server), so embedded mode only pings.
func (s *server) checkRedis(ctx context.Context) error {
	if s.mini == nil {
		return s.redis.CheckServers(ctx)
	}
	return s.redis.Do(ctx, "", func(c redis.Conn) error {
		_, err := c.Do("PING")
		return err
	})
}

// queueOptions are the engine's settings from the config, with the
// partition count given.
func queueOptions(cfg config.Config, partitions int, cluster bool, observer delayqueue.Observer) delayqueue.Options {
	return delayqueue.Options{
		BucketSize:      partitions,
		BucketName:      cfg.BucketName,
		QueueName:       cfg.QueueName,
		KeyPrefix:       cfg.KeyPrefix,
		BlockTimeout:    cfg.QueueBlockTimeout,
		DeadMaxPerTopic: cfg.DeadMaxPerTopic,
		DeadTTL:         cfg.DeadTTL,
		MaxHeldPops:     cfg.MaxHeldPops,
		Observer:        observer,
		WaitReplicas:    cfg.Redis.WaitReplicas,
		WaitTimeout:     cfg.Redis.WaitTimeout,
		Cluster:         cluster,
	}
}

// defaultPartitions is the partition count of new data when bucket_size
// is unset.
func (s *server) defaultPartitions() int {
	if s.redis.Cluster() {
		return defaults.ClusterBucketSize
	}
	return defaults.BucketSize
}

// buildQueue builds the engine with the partition count the data was
// written with (or, for new data, the configured or default one).
func (s *server) buildQueue(ctx context.Context) error {
	partitions, err := delayqueue.ResolvePartitions(ctx, s.redis, s.cfg.KeyPrefix, s.cfg.BucketSize, s.defaultPartitions())
	if err != nil {
		return err
	}
	s.queue, err = delayqueue.New(s.redis, queueOptions(s.cfg, partitions, s.redis.Cluster(), s.observer), s.log)
	if err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	return nil
}

// buildHooks builds the webhook dispatcher.
func (s *server) buildHooks() error {
	perHost, grace := s.cfg.CallbackLimits()
	var err error
	s.hooks, err = webhook.New(s.queue, webhook.Options{
		Secret:        s.cfg.CallbackSecret,
		Allow:         s.cfg.CallbackAllow,
		Concurrency:   s.cfg.CallbackConcurrency,
		PerHost:       perHost,
		ShutdownGrace: grace,
		Metrics:       s.observer,
	}, s.log)
	if err != nil {
		return fmt.Errorf("callback_allow: %w", err)
	}
	return nil
}

// buildHTTP builds the HTTP server: net/http, and in front of it, with
// http_fast_path, internal/http1, which serves the job endpoints' plain
// requests without net/http's per-request cost and hands it the rest.
func (s *server) buildHTTP() {
	cfg := s.cfg
	handler := routers.New(s.queue, routers.Options{
		MaxBodyBytes:    cfg.MaxBodyBytes,
		ReadBodyTimeout: cfg.ReadBodyTimeout,
		WriteTimeout:    cfg.WriteTimeout,
		MaxJobBodyBytes: int(cfg.JobBodyLimit()),
		BlockTimeout:    cfg.QueueBlockTimeout,
		MaxHeldPops:     cfg.MaxHeldPops,
		AuthToken:       cfg.AuthToken,
		Metrics:         s.observer.Handler(),
		MetricsAuth:     cfg.MetricsAuth,
		AllowedHosts:    cfg.AllowedHosts,
		ObserveRequest:  s.observer.ObserveRequest,
		UI:              ui.Handler(),
	}, s.log)
	plain := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		// From the end of the head; the handlers' answers set it again as
		// they are written (routers.Options.WriteTimeout).
		WriteTimeout: cfg.WriteTimeout,
		ErrorLog:     slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	if !cfg.HTTPFastPath {
		s.http = plain
		return
	}
	s.http = &http1.Server{
		Handler:  handler,
		Fallback: plain,
		Paths:    routers.JobPaths(),
		// A body over max_body_bytes goes to net/http, whose 413 closes
		// the connection.
		MaxBody:           min(cfg.MaxBodyBytes, http1.DefaultMaxBody),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadBodyTimeout:   cfg.ReadBodyTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		Logger:            s.log,
	}
}

// close releases what newServer and run opened, in reverse order.
func (s *server) close() {
	if s.stopDebug != nil {
		s.stopDebug()
	}
	if s.listener != nil {
		_ = s.listener.Close()
	}
	if s.redis != nil {
		_ = s.redis.Close()
	}
	if s.mini != nil {
		s.mini.Close()
	}
}

// listen opens bind_address and warns about settings that expose the API.
func (s *server) listen() error {
	cfg := s.cfg
	var err error
	if s.listener, err = net.Listen("tcp", cfg.BindAddress); err != nil {
		return fmt.Errorf("listen on bind_address %s: %w", cfg.BindAddress, err)
	}
	if cfg.AuthToken != "" && len(cfg.AuthToken) < config.MinAuthTokenBytes {
		s.log.Warn("auth_token is short and could be guessed: use a random string of at least 16 characters, e.g. openssl rand -hex 32",
			"length", len(cfg.AuthToken))
	}
	if exposedWithoutAuth(s.listener.Addr(), cfg.AuthToken) {
		s.log.Warn("bind_address is not a loopback address and the API has no authentication: "+
			"anyone who can reach it can push, pop and delete jobs; set auth_token", "addr", s.listener.Addr().String())
	}
	if cfg.DebugAddr != "" {
		if s.stopDebug, err = serveDebug(cfg.DebugAddr, s.log); err != nil {
			return err
		}
	}
	return nil
}

// running is what run started, to stop it in reverse order.
type running struct {
	queueDone, hooksDone, serveDone chan error
	stopQueue, stopHooks            context.CancelFunc
	sampling                        <-chan struct{}
}

// run serves until ctx is done (a signal) or a part fails, then shuts down
// in order: held pops are answered, webhook calls get their grace, HTTP
// drains, the engine stops, the connections close. It returns nil after a
// shutdown caused by ctx.
func (s *server) run(ctx context.Context) error {
	defer s.close()
	if err := s.listen(); err != nil {
		return err
	}
	r := s.start(ctx)
	s.log.Info("listening", "addr", s.listener.Addr().String(), "dashboard", dashboardURL(s.listener.Addr()),
		"redis", s.target, "partitions", s.queue.Partitions(), "version", version, "auth", s.cfg.AuthToken != "",
		"http_fast_path", s.cfg.HTTPFastPath)

	var failure error
	select {
	case <-ctx.Done():
		s.log.Info("shutting down", "reason", context.Cause(ctx).Error())
	case err := <-r.serveDone:
		failure = fmt.Errorf("http server stopped: %w", err)
	case err := <-r.queueDone:
		failure = fmt.Errorf("queue stopped unexpectedly: %w", err)
		if err == nil {
			failure = errors.New("queue stopped unexpectedly")
		}
		r.queueDone = nil
	}
	if err := s.stop(r); err != nil && failure == nil {
		failure = err
	}
	s.log.Info("stopped")
	return failure
}

// start runs the engine (which first migrates older layouts: /readyz
// answers 503 meanwhile), the metrics sampling, the webhook dispatcher and
// HTTP. The engine and the dispatcher get contexts of their own: they must
// keep running while held pops are answered and HTTP drains.
func (s *server) start(ctx context.Context) *running {
	r := &running{queueDone: make(chan error, 1), hooksDone: make(chan error, 1), serveDone: make(chan error, 1)}
	var queueCtx, hooksCtx context.Context
	queueCtx, r.stopQueue = context.WithCancel(context.WithoutCancel(ctx))
	go func() { r.queueDone <- s.queue.Run(queueCtx) }()
	r.sampling = s.observer.WatchQueue(queueCtx, s.queue)
	s.observer.WatchPool(s.redis.Stats)

	hooksCtx, r.stopHooks = context.WithCancel(context.WithoutCancel(ctx))
	go func() { r.hooksDone <- s.hooks.Run(hooksCtx) }()
	go func() { r.serveDone <- s.http.Serve(s.listener) }()
	return r
}

// stop shuts down what start started, in reverse order, and returns the
// first failure met.
func (s *server) stop(r *running) error {
	var failure error
	// Held pops answer data:null now, so HTTP can drain promptly; webhook
	// dispatchers start no new call.
	s.queue.StopWaiting()
	r.stopHooks()
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
	defer cancelHTTP()
	if err := s.http.Shutdown(httpCtx); err != nil {
		s.log.Warn("http requests still running at shutdown_timeout; closing their connections", "err", err)
		_ = s.http.Close()
	}
	if err := <-r.hooksDone; err != nil {
		failure = fmt.Errorf("webhook dispatcher: %w", err)
	}
	r.stopQueue()
	if r.queueDone != nil {
		waitCtx, cancelWait := context.WithTimeout(context.Background(), s.cfg.ShutdownTimeout)
		defer cancelWait()
		select {
		case err := <-r.queueDone:
			if err != nil && failure == nil {
				failure = fmt.Errorf("queue: %w", err)
			}
		case <-waitCtx.Done():
			if failure == nil {
				failure = errors.New("queue scanners did not stop within shutdown_timeout")
			}
		}
	}
	<-r.sampling
	return failure
}

// serve runs the server the config describes until ctx is done.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	s, err := newServer(ctx, cfg, logger)
	if err != nil {
		return err
	}
	return s.run(ctx)
}

// repartitionJobs moves the jobs in Redis to count partitions (see
// delayqueue.Repartition), offline, and says how many moved.
func repartitionJobs(ctx context.Context, cfg config.Config, count int, logger *slog.Logger, stdout io.Writer) error {
	if count < 1 || count > config.MaxBucketSize {
		return usageError{fmt.Errorf("-repartition %d: the partition count must be between 1 and %d", count, config.MaxBucketSize)}
	}
	if cfg.Redis.Embedded() {
		return usageError{errors.New("-repartition needs a real Redis: the embedded one starts empty")}
	}
	s := &server{cfg: cfg, log: logger}
	defer s.close()
	if err := s.connect(ctx); err != nil {
		return err
	}
	layout, found, err := delayqueue.ReadLayout(ctx, s.redis, cfg.KeyPrefix)
	if err != nil {
		return err
	}
	if found && layout.Partitions == count && layout.MovingTo == 0 {
		fmt.Fprintf(stdout, "the jobs are spread over %d partitions already: nothing to do\n", count)
		return nil
	}
	moved, err := delayqueue.Repartition(ctx, s.redis, queueOptions(cfg, 0, s.redis.Cluster(), nil), count, logger)
	if err != nil {
		return fmt.Errorf("repartition (%d jobs moved so far; run it again to go on): %w", moved, err)
	}
	fmt.Fprintf(stdout, "moved %d jobs: the jobs are spread over %d partitions; set bucket_size = %d (or leave it unset) before starting the servers\n",
		moved, count, count)
	return nil
}

// dashboardURL is where the dashboard of a server listening on addr is.
func dashboardURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return ""
	}
	host := "127.0.0.1"
	if !tcp.IP.IsUnspecified() {
		host = tcp.IP.String()
	}
	return "http://" + net.JoinHostPort(host, fmt.Sprint(tcp.Port)) + ui.Prefix + "/"
}

// exposedWithoutAuth reports whether the API listens beyond loopback with
// no token: the case the start-up warning is for.
func exposedWithoutAuth(addr net.Addr, authToken string) bool {
	return !isLoopback(addr) && authToken == ""
}

// isLoopback reports whether a listener only accepts local connections.
// 0.0.0.0 and :: are not loopback.
func isLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
