package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/config"
	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/http1"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/metrics"
	"github.com/delay-queue/delay-queue/routers"
	"github.com/delay-queue/delay-queue/ui"
	"github.com/delay-queue/delay-queue/webhook"
)

// serve starts everything in order (Redis check, legacy import, scanners,
// HTTP), waits for ctx to be done or for a component to fail, then stops
// everything in reverse order. It returns nil after a shutdown caused by
// ctx.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	redisOpts := redisconn.Options{
		Addr:           cfg.Redis.Host,
		DB:             cfg.Redis.DB,
		Username:       cfg.Redis.Username,
		Password:       cfg.Redis.Password,
		TLS:            cfg.Redis.TLS,
		SentinelAddrs:  cfg.Redis.SentinelAddrs,
		MasterName:     cfg.Redis.MasterName,
		MaxIdle:        cfg.Redis.MaxIdle,
		MaxActive:      cfg.Redis.MaxActive,
		ConnectTimeout: cfg.Redis.ConnectTimeout,
		ReadTimeout:    cfg.Redis.ReadTimeout,
		WriteTimeout:   cfg.Redis.WriteTimeout,
	}
	if cfg.Redis.TLS && !cfg.Redis.Embedded() {
		tlsConfig, err := redisconn.NewTLSConfig(cfg.Redis.TLSCAFile, cfg.Redis.TLSServerName)
		if err != nil {
			return fmt.Errorf("redis.tls_ca_file: %w", err)
		}
		redisOpts.TLSConfig = tlsConfig
	}
	if cfg.Redis.Embedded() {
		mini := miniredis.NewMiniRedis()
		if err := mini.StartAddr("127.0.0.1:0"); err != nil {
			return fmt.Errorf("start embedded redis: %w", err)
		}
		// Deferred first, so it stops after the pool is closed.
		defer mini.Close()
		redisOpts.Addr = mini.Addr()
		// miniredis has no password unless told; the conf's is meant for
		// the real server, like its ACL user, TLS and Sentinel settings.
		redisOpts.Username, redisOpts.Password = "", ""
		redisOpts.TLS = false
		redisOpts.SentinelAddrs, redisOpts.MasterName = nil, ""
		logger.Warn("embedded redis: jobs live in this process's memory only and are lost when it exits",
			"redis_addr", redisOpts.Addr)
	}

	// target names the Redis the server uses, for errors and the log.
	target := redisOpts.Addr
	if len(redisOpts.SentinelAddrs) > 0 {
		target = fmt.Sprintf("sentinel master %q via %s", redisOpts.MasterName, strings.Join(redisOpts.SentinelAddrs, ","))
	}
	pool := redisconn.NewPool(redisOpts)
	defer pool.Close()
	if err := checkRedis(ctx, pool, cfg.Redis.Embedded()); err != nil {
		// The engine's errors usually name the address already.
		if len(redisOpts.SentinelAddrs) == 0 && strings.Contains(err.Error(), redisOpts.Addr) {
			return fmt.Errorf("start-up check of redis.host: %w", err)
		}
		return fmt.Errorf("start-up check of redis (%s): %w", target, err)
	}

	observer := metrics.New(metrics.Options{MaxTopicLabels: cfg.MetricsTopicLabels}, logger)
	queue, err := delayqueue.New(pool, delayqueue.Options{
		BucketSize:      cfg.BucketSize,
		BucketName:      cfg.BucketName,
		QueueName:       cfg.QueueName,
		KeyPrefix:       cfg.KeyPrefix,
		BlockTimeout:    cfg.QueueBlockTimeout,
		DeadMaxPerTopic: cfg.DeadMaxPerTopic,
		DeadTTL:         cfg.DeadTTL,
		MaxHeldPops:     cfg.MaxHeldPops,
		Observer:        observer,
		Dial:            redisOpts.Dial,
		WaitReplicas:    cfg.Redis.WaitReplicas,
		WaitTimeout:     cfg.Redis.WaitTimeout,
	}, logger)
	if err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	// The import must finish before the scanners start, so they never see
	// a half-converted job.
	imported, err := queue.ImportLegacy(ctx)
	if err != nil {
		return fmt.Errorf("import jobs left by the original server (%d imported so far): %w", imported, err)
	}
	logger.Info("imported jobs left by the original server", "count", imported)

	listener, err := net.Listen("tcp", cfg.BindAddress)
	if err != nil {
		return fmt.Errorf("listen on bind_address %s: %w", cfg.BindAddress, err)
	}
	if cfg.AuthToken != "" && len(cfg.AuthToken) < config.MinAuthTokenBytes {
		logger.Warn("auth_token is short and could be guessed: use a random string of at least 16 characters, e.g. openssl rand -hex 32",
			"length", len(cfg.AuthToken))
	}
	if exposedWithoutAuth(listener.Addr(), cfg.AuthToken) {
		logger.Warn("bind_address is not a loopback address and the API has no authentication: "+
			"anyone who can reach it can push, pop and delete jobs; set auth_token", "addr", listener.Addr().String())
	}

	// Webhook calls stop with held pops, first, and get their own grace.
	// Everything that can fail is built before anything runs.
	perHost, grace := cfg.CallbackLimits()
	hooks, err := webhook.New(queue, redisOpts.Dial, webhook.Options{
		Secret:        cfg.CallbackSecret,
		Allow:         cfg.CallbackAllow,
		Concurrency:   cfg.CallbackConcurrency,
		PerHost:       perHost,
		ShutdownGrace: grace,
		Metrics:       observer,
	}, logger)
	if err != nil {
		return fmt.Errorf("callback_allow: %w", err)
	}
	if cfg.DebugAddr != "" {
		stopDebug, err := serveDebug(cfg.DebugAddr, logger)
		if err != nil {
			return err
		}
		defer stopDebug()
	}

	// The queue gets its own context: it must keep running while held pops
	// are answered and HTTP drains, and stop only after that.
	queueCtx, stopQueue := context.WithCancel(context.WithoutCancel(ctx))
	defer stopQueue()
	queueDone := make(chan error, 1)
	go func() { queueDone <- queue.Run(queueCtx) }()
	sampling := observer.WatchQueue(queueCtx, queue)
	observer.WatchPool(pool)

	hooksCtx, stopHooks := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHooks()
	hooksDone := make(chan error, 1)
	go func() { hooksDone <- hooks.Run(hooksCtx) }()

	handler := routers.New(queue, routers.Options{
		MaxBodyBytes:    cfg.MaxBodyBytes,
		MaxJobBodyBytes: int(cfg.JobBodyLimit()),
		BlockTimeout:    cfg.QueueBlockTimeout,
		MaxHeldPops:     cfg.MaxHeldPops,
		AuthToken:       cfg.AuthToken,
		Metrics:         observer.Handler(),
		MetricsAuth:     cfg.MetricsAuth,
		ObserveRequest:  observer.ObserveRequest,
		UI:              ui.Handler(),
	}, logger)
	// The job endpoints' plain requests are served by http1, without
	// net/http's per-request cost; everything else by net/http.
	server := &http1.Server{
		Handler: handler,
		Fallback: &http.Server{
			Handler:           handler,
			ReadHeaderTimeout: cfg.ReadHeaderTimeout,
			IdleTimeout:       cfg.IdleTimeout,
			// No WriteTimeout: a held /pop answers after up to
			// queue_block_timeout, and a write timeout would cut it.
			ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		},
		Paths:             routers.JobPaths(),
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		Logger:            logger,
	}
	serveDone := make(chan error, 1)
	go func() { serveDone <- server.Serve(listener) }()
	logger.Info("listening", "addr", listener.Addr().String(), "redis", target, "version", version,
		"auth", cfg.AuthToken != "")

	var failure error
	select {
	case <-ctx.Done():
		logger.Info("shutting down", "reason", context.Cause(ctx).Error())
	case err := <-serveDone:
		failure = fmt.Errorf("http server stopped: %w", err)
	case err := <-queueDone:
		failure = fmt.Errorf("queue stopped unexpectedly: %w", err)
		if err == nil {
			failure = errors.New("queue stopped unexpectedly")
		}
		queueDone = nil
	}

	// Held pops answer data:null now, so HTTP can drain promptly; webhook
	// dispatchers start no new call.
	queue.StopWaiting()
	stopHooks()
	httpCtx, cancelHTTP := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancelHTTP()
	if err := server.Shutdown(httpCtx); err != nil {
		logger.Warn("http requests still running at shutdown_timeout; closing their connections", "err", err)
		_ = server.Close()
	}

	if err := <-hooksDone; err != nil && failure == nil {
		failure = fmt.Errorf("webhook dispatcher: %w", err)
	}
	stopQueue()
	if queueDone != nil {
		queueCtx, cancelWait := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
		defer cancelWait()
		select {
		case err := <-queueDone:
			if err != nil && failure == nil {
				failure = fmt.Errorf("queue: %w", err)
			}
		case <-queueCtx.Done():
			if failure == nil {
				failure = errors.New("queue scanners did not stop within shutdown_timeout")
			}
		}
	}
	<-sampling
	// The deferred pool.Close and mini.Close run next, in that order.
	logger.Info("stopped")
	return failure
}

// checkRedis makes sure Redis answers before anything starts. A real server
// must also be new enough; miniredis does not report redis_version in INFO
// (it rejects INFO server), so embedded mode only pings.
func checkRedis(ctx context.Context, pool *redis.Pool, embedded bool) error {
	if !embedded {
		return redisconn.CheckServer(ctx, pool)
	}
	conn, err := pool.GetContext(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Do("PING"); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
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
