// Package http1 serves the plain requests of the API's job endpoints over
// HTTP/1.1 without net/http's per-request machinery, and hands every other
// connection to a net/http server. It is a shortcut for the common case,
// not a second HTTP implementation, and gains no features of its own: a
// request it takes is answered as net/http would answer it, by the same
// http.Handler, and whatever it does not take, net/http serves. The
// server's http_fast_path setting turns it off, leaving net/http alone.
//
// Profiles of the push load showed net/http's serving loop costing about a
// third of the server's CPU: a background read goroutine per request (which
// notices a client leaving), a deadline dance to stop it, and allocations.
//
// # What it takes
//
// A request is served here when all of this holds, and every request
// before it on its connection was served here too:
//
//   - its request line is exactly "POST <path> HTTP/1.1", the path one of
//     Server.Paths as written (no query string, no other spelling);
//   - its head fits in the connection's read buffer (4 KiB), its lines end
//     in CRLF or LF with no other CR, none is folded, header names are
//     tokens and values hold no control characters but tabs;
//   - it has one Host, not empty, of letters, digits and ".-:[]_";
//   - it has at most one Content-Length, in decimal digits, of at most
//     Server.MaxBody (none: no body);
//   - it has no Transfer-Encoding, Expect, Upgrade or Trailer header, and a
//     Connection header, if any, names only keep-alive and close.
//
// Every head taken here is one net/http reads alike (the fuzz test
// FuzzParseHeadAgreesWithNetHTTP checks it). The first request that is
// anything else (a GET, a chunked or larger body, HTTP/1.0, Expect:
// 100-continue, a query string, an odd or malformed header, a longer head)
// hands its connection, with the bytes read so far, to the net/http server
// (Server.Fallback), which then owns it to the end: the uncommon and the
// malformed cases get net/http's behaviour, its 400s included, not a
// second implementation of it.
//
// # What the handler gets
//
// The *http.Request net/http would build for such a head (method, URL,
// protocol, Host, Header, ContentLength, Close, RemoteAddr, RequestURI),
// with its body read before the handler runs, within ReadBodyTimeout: a
// body cut short reads as the bytes that came, then the error (a deadline
// passed, an unexpected EOF), as in net/http, and its connection is closed
// after the answer. The request's context carries none of net/http's
// values (http.ServerContextKey, http.LocalAddrContextKey).
//
// The http.ResponseWriter collects the answer, which is written when the
// handler returns as net/http writes it: the status line, the handler's
// headers, Date, a Content-Type sniffed as net/http does, and
// Content-Length (always: net/http turns to chunked encoding past 2 KiB).
// It is a plain one: no Flusher, Hijacker or informational (1xx) answers,
// and its SetReadDeadline does nothing (the body is in already). The
// framing headers are the connection's: a Content-Length or
// Transfer-Encoding the handler sets is dropped, and a Connection: close
// it sets closes the connection. A handler that needs more serves paths
// left to net/http.
//
// # Held requests
//
// A request on a path that can hold (a /pop waiting for jobs) has its
// context cancelled when the client goes away, as net/http does, by a
// watcher that reads ahead into the connection's buffer (bounded by it), so
// that requests pipelined behind the held one are kept for after it and a
// close behind them is still seen. The watcher starts once such a request
// has run for watchDelay, so a pop answered at once costs nothing; quick
// paths get no watcher.
package http1

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// DefaultMaxBody is the largest Content-Length taken when Server.MaxBody
// is zero. Larger requests (batches) go to net/http.
const DefaultMaxBody = 64 << 10

// MaxHeadBytes is the longest request head this server takes: a longer
// one (a large Authorization header, say) goes to the fallback. It is the
// read buffer of a connection (readBufferSize).
const MaxHeadBytes = readBufferSize

// readBufferSize is the read buffer of a connection: a request head must
// fit in it to be taken here.
const readBufferSize = 4096

// maxKeptReply is the largest answer buffer a connection keeps for its
// next request.
const maxKeptReply = 64 << 10

// Server serves one listener: the requests it takes itself, the rest
// through Fallback.
type Server struct {
	// Handler runs the requests taken here; normally Fallback.Handler.
	Handler http.Handler
	// Fallback serves the connections handed to it. Its Handler, timeouts
	// and ErrorLog apply to them; Serve starts it, Shutdown and Close stop
	// it. Its Addr and listener-related fields are ignored.
	Fallback *http.Server
	// Paths are the request paths taken here; a true value marks a path
	// whose requests can hold, so that a client leaving cancels them.
	Paths map[string]bool
	// MaxBody is the largest Content-Length taken here (0: DefaultMaxBody).
	// Keep it within the handler's own limit: a handler refusing a body as
	// too large (http.MaxBytesReader) has net/http close the connection
	// after the answer, which it cannot ask of this package.
	MaxBody int64
	// ReadHeaderTimeout bounds reading a request head and IdleTimeout the
	// wait for the next request on a kept-alive connection; zero means no
	// limit, as in net/http.
	ReadHeaderTimeout time.Duration
	IdleTimeout       time.Duration
	// ReadBodyTimeout bounds reading the body of a request taken here,
	// from the end of its head. The handler of a slower one reads the
	// bytes that came, then an error matching os.ErrDeadlineExceeded, as
	// it would under a read deadline in net/http; its answer is sent and
	// the connection closed. Zero means no limit. (net/http has no such
	// bound short of ReadTimeout, which would also cut held requests: a
	// Fallback handler that reads bodies sets its own, through
	// http.ResponseController.)
	ReadBodyTimeout time.Duration
	// WriteTimeout bounds writing an answer, from when the handler
	// returns: a client that stops reading loses its connection then. Zero
	// means no limit.
	WriteTimeout time.Duration
	Logger       *slog.Logger

	mu       sync.Mutex
	listener net.Listener
	handoff  *handoffListener
	conns    map[*conn]struct{}
	// closing is set by Shutdown and Close: connections end after their
	// current response and idle ones are closed.
	closing     atomic.Bool
	fallbackErr atomic.Pointer[error]
}

// Serve accepts connections on l until Shutdown or Close, and serves them.
// It always returns a non-nil error: http.ErrServerClosed after a shutdown.
func (s *Server) Serve(l net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.listener = l
	s.handoff = newHandoffListener(l.Addr())
	s.conns = make(map[*conn]struct{})
	handoff := s.handoff
	s.mu.Unlock()

	go func() {
		err := s.Fallback.Serve(handoff)
		if !s.closing.Load() {
			// The net/http side failed on its own: stop serving with its
			// error rather than hand connections to nobody.
			s.fallbackErr.Store(&err)
			_ = l.Close()
		}
	}()

	var backoff time.Duration
	for {
		rw, err := l.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if failed := s.fallbackErr.Load(); failed != nil {
				return fmt.Errorf("http fallback server: %w", *failed)
			}
			var netErr net.Error
			if errors.As(err, &netErr) && netErr.Timeout() || isTemporary(err) {
				// Too many open files and the like: wait and retry, as
				// net/http does, instead of stopping the server.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.logger().Warn("http: accept failed; retrying", "err", err, "retry_in", backoff)
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		c := newConn(s, rw)
		if !s.track(c) {
			_ = rw.Close()
			return http.ErrServerClosed
		}
		go c.serve()
	}
}

// isTemporary reports an accept error worth retrying (EMFILE, ENFILE,
// ECONNABORTED and the like report Temporary).
func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.Default()
}

func (s *Server) maxBody() int64 {
	if s.MaxBody > 0 {
		return s.MaxBody
	}
	return DefaultMaxBody
}

// track adds c to the connections Shutdown waits for; false once closing.
func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Load() {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *Server) forget(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// handOff gives a connection to the net/http server. False when it is
// shutting down: the caller closes the connection.
func (s *Server) handOff(c net.Conn) bool {
	return s.handoff.give(c)
}

// Shutdown stops accepting, closes idle connections, and waits until every
// request in progress has been answered, its own and the net/http
// server's, or ctx ends; then it returns ctx's error and leaves the rest
// to Close.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginClosing()
	fallbackDone := make(chan error, 1)
	go func() { fallbackDone <- s.Fallback.Shutdown(ctx) }()

	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for {
		if s.closeIdle() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-poll.C:
		}
	}
	return <-fallbackDone
}

// Close closes the listener and every connection at once, its own and
// the net/http server's.
func (s *Server) Close() error {
	s.beginClosing()
	s.mu.Lock()
	for c := range s.conns {
		_ = c.rwc.Close()
	}
	s.mu.Unlock()
	return s.Fallback.Close()
}

func (s *Server) beginClosing() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing.Swap(true) {
		return
	}
	if s.listener != nil {
		_ = s.listener.Close()
	}
	if s.handoff != nil {
		s.handoff.stop()
	}
}

// closeIdle closes the connections waiting for a request and returns how
// many connections are left.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c.state.CompareAndSwap(stateIdle, stateClosed) {
			_ = c.rwc.Close()
		}
	}
	return len(s.conns)
}

// handoffListener is the net/http server's listener: Accept returns the
// connections handed over.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn

	mu      sync.Mutex
	stopped bool
	done    chan struct{}
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// give passes c to Accept; false once the listener is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *handoffListener) stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.stopped {
		l.stopped = true
		close(l.done)
	}
}

// Close is called by the net/http server when it shuts down.
func (l *handoffListener) Close() error {
	l.stop()
	return nil
}

func (l *handoffListener) Addr() net.Addr { return l.addr }
