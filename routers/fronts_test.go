package routers

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/http1"
)

// servedByHeader names, in a test server's answers, the server that ran the
// request, so that a test knows it took the path it meant to.
const servedByHeader = "X-Test-Served-By"

// The two servers that can run a request.
const (
	viaFastPath = "internal/http1"
	viaNetHTTP  = "net/http"
)

func servedBy(via string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(servedByHeader, via)
		next.ServeHTTP(w, r)
	})
}

// A front is one way the binary serves the handler, as http_fast_path
// chooses: net/http alone, or internal/http1 for the job endpoints' plain
// requests with net/http for the rest. The two must answer alike: a test
// that finds them apart has found a bug.
type front struct {
	name string
	fast bool
}

// fronts are both settings of http_fast_path.
func fronts() []front {
	return []front{{name: "net/http"}, {name: "fast path", fast: true}}
}

// forEachFront runs test as a subtest on each front.
func forEachFront(t *testing.T, test func(t *testing.T, f front)) {
	t.Helper()
	for _, f := range fronts() {
		t.Run(f.name, func(t *testing.T) { test(t, f) })
	}
}

// serve serves New(q, opts, logger) through the front; see serveHandler.
func (f front) serve(t testing.TB, q Queue, opts Options, logger *slog.Logger) string {
	t.Helper()
	return f.serveHandler(t, New(q, opts, logger), opts)
}

// serveHandler serves h, built with opts, through the front on a loopback
// port and returns its URL. The servers get the settings the binary gives
// them (cmd/delay-queue's buildHTTP), with short header timeouts. Every
// answer the handler writes carries servedByHeader. When the test ends,
// the server stops after the requests in progress have been answered.
func (f front) serveHandler(t testing.TB, h http.Handler, opts Options) string {
	t.Helper()
	opts = opts.withDefaults()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	plain := &http.Server{Handler: servedBy(viaNetHTTP, h), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: opts.WriteTimeout}
	var srv interface {
		Serve(net.Listener) error
		Shutdown(context.Context) error
		Close() error
	} = plain
	if f.fast {
		srv = &http1.Server{
			Handler:           servedBy(viaFastPath, h),
			Fallback:          plain,
			Paths:             JobPaths(),
			MaxBody:           fastPathMaxBody(opts),
			ReadHeaderTimeout: 5 * time.Second,
			ReadBodyTimeout:   opts.ReadBodyTimeout,
			WriteTimeout:      opts.WriteTimeout,
		}
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	t.Cleanup(func() {
		// The clients' idle connections go first: net/http's Shutdown
		// would wait for one that never carried a request.
		for _, c := range []*http.Client{http.DefaultClient, fastClient, otherClient} {
			c.CloseIdleConnections()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("%s server: requests still running 10 s after the test: %v", f.name, err)
			_ = srv.Close()
		}
		<-served
	})
	return "http://" + l.Addr().String()
}

// fastPathMaxBody is the largest body the fast path takes, as the binary
// sets it: none that the handler refuses as too large (its 413 closes the
// connection, which net/http does).
func fastPathMaxBody(opts Options) int64 {
	return min(opts.withDefaults().MaxBodyBytes, http1.DefaultMaxBody)
}

// via names the server that runs a plain POST to path with a body of n
// bytes, sent to this front: the fast path for a job endpoint's, when on.
func (f front) via(path string, n int, opts Options) string {
	if _, job := JobPaths()[path]; f.fast && job && int64(n) <= fastPathMaxBody(opts) {
		return viaFastPath
	}
	return viaNetHTTP
}

// checkVia fails the test unless got, the answer to a plain POST to path
// with a body of n bytes, was run by the server it should have been.
func (f front) checkVia(t testing.TB, got response, path string, n int, opts Options) {
	t.Helper()
	if via, want := got.header.Get(servedByHeader), f.via(path, n, opts); via != want {
		t.Errorf("%s front: POST %s (%d bytes) was served by %q, want %q", f.name, path, n, via, want)
	}
}

// The clients of the end-to-end tests keep their connections alive, as
// API clients do, and the requests the fast path takes go over connections
// of their own: a connection that has carried any other request belongs to
// net/http from then on, and the job requests sent over it later would no
// longer test the fast path.
var (
	fastClient  = &http.Client{Transport: &http.Transport{}}
	otherClient = &http.Client{Transport: &http.Transport{}}
)

// clientFor returns the client for a plain POST to path with a body of n
// bytes, to a server with the default max_body_bytes.
func clientFor(path string, n int) *http.Client {
	if (front{fast: true}).via(path, n, Options{}) == viaFastPath {
		return fastClient
	}
	return otherClient
}
