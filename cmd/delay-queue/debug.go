package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveDebug starts the debug_addr listener: Go's profiler (net/http/pprof)
// on a mux of its own, apart from the API so that it never shares the API's
// port, auth or request log. It returns a function that stops it.
func serveDebug(addr string, logger *slog.Logger) (stop func(), err error) {
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on debug_addr %s: %w", addr, err)
	}
	if !isLoopback(listener.Addr()) {
		logger.Warn("debug_addr is not a loopback address: anyone who can reach it can profile the process "+
			"and read its command line; bind it to 127.0.0.1", "addr", listener.Addr().String())
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	server := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		// No WriteTimeout: a CPU profile or a trace streams for as many
		// seconds as asked.
		ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := server.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("debug listener stopped", "err", err)
		}
	}()
	logger.Info("debug listener (pprof)", "addr", listener.Addr().String())
	return func() {
		// A profile in progress is cut: nothing waits for it at shutdown.
		_ = server.Close()
		<-done
	}, nil
}
