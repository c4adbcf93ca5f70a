package routers

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"runtime/debug"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/wire"
)

// requestRecord collects what the request log line reports. logRequests puts
// one in the request context; handlers fill in the job they worked on and
// writeEnvelope the outcome.
type requestRecord struct {
	// endpoint is the route's path, set once the mux picked a route.
	endpoint string
	// quiet requests log their successes at debug (see route.quiet).
	quiet   bool
	topic   string
	jobID   string
	status  int
	code    int
	message string // of a failure, for the log line
	written bool
	// writeTimeout is write_timeout: writeEnvelope gives the answer that
	// long from when it writes (see armWriteDeadline).
	writeTimeout time.Duration

	// Room for the answer, so that writeEnvelope allocates nothing for a
	// usual one: its body, and its header values.
	body   [256]byte
	values [4]string
}

type requestRecordKey struct{}

// recordContext is a request's context with its record: one allocation
// for both.
type recordContext struct {
	context.Context
	rec requestRecord
}

func (c *recordContext) Value(key any) any {
	if key == (requestRecordKey{}) {
		return &c.rec
	}
	return c.Context.Value(key)
}

// recordOf returns the request's record, or a throwaway one when the
// request did not pass through logRequests.
func recordOf(r *http.Request) *requestRecord {
	if rec, ok := r.Context().Value(requestRecordKey{}).(*requestRecord); ok {
		return rec
	}
	return &requestRecord{}
}

// noteJob records the topic and job id a request is about, for the log line.
func noteJob(r *http.Request, topic, id string) {
	rec := recordOf(r)
	if topic != "" {
		rec.topic = topic
	}
	if id != "" {
		rec.jobID = id
	}
}

// logRequests writes one line per request at info: method, path, status,
// code, duration, and the topic and job id when the request named them.
// Probes and scrapes log their successes at debug, so that a load balancer
// polling /readyz does not drown the rest. Job bodies and the Authorization
// header are never logged. It also reports every request to
// Options.ObserveRequest.
func (h *handler) logRequests(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ctx := &recordContext{Context: r.Context()}
		rec := &ctx.rec
		rec.writeTimeout = h.opts.WriteTimeout
		r = r.WithContext(ctx)
		defer func() {
			elapsed := time.Since(start)
			if rec.status == 0 {
				// Nothing was written: net/http answers 200 with no body.
				rec.status = http.StatusOK
			}
			endpoint := rec.endpoint
			if endpoint == "" {
				endpoint = h.endpointOf(r.URL.Path)
			}
			if h.opts.ObserveRequest != nil {
				h.opts.ObserveRequest(endpoint, rec.code, elapsed)
			}
			level := slog.LevelInfo
			if rec.quiet && rec.code == wire.CodeSuccess && rec.status == http.StatusOK {
				level = slog.LevelDebug
			}
			if !h.logger.Enabled(r.Context(), level) {
				return
			}
			attrs := []slog.Attr{
				slog.String("method", r.Method),
				slog.String("path", r.URL.Path),
				slog.Int("status", rec.status),
				slog.Int("code", rec.code),
				slog.Duration("duration", elapsed),
			}
			if rec.topic != "" {
				attrs = append(attrs, slog.String(logKeyTopic, rec.topic))
			}
			if rec.jobID != "" {
				attrs = append(attrs, slog.String(logKeyJobID, rec.jobID))
			}
			if rec.message != "" {
				attrs = append(attrs, slog.String("message", rec.message))
			}
			h.logger.LogAttrs(r.Context(), level, "http request", attrs...)
		}()
		next.ServeHTTP(w, r)
	})
}

// endpointOf is the endpoint label of a path: itself when it is routed,
// else "unknown", so that scanners probing random paths cannot grow the
// metrics without bound.
func (h *handler) endpointOf(path string) string {
	if _, ok := h.methodOf[path]; ok {
		return path
	}
	return unknownEndpoint
}

// recoverPanics turns a panic in a handler into a logged error and a code 1
// answer, instead of a dropped connection.
func (h *handler) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if p == http.ErrAbortHandler {
				panic(p) // the documented way to abort a response on purpose
			}
			h.logger.ErrorContext(r.Context(), "panic in http handler",
				slog.String("method", r.Method), slog.String("path", r.URL.Path),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
			writeEnvelope(w, r, http.StatusOK, wire.CodeFailure, msgInternalError, nil)
		}()
		next.ServeHTTP(w, r)
	})
}

// rejectCrossOrigin answers 403 to a request whose Origin header names
// another host than the one it was sent to. Browsers send Origin on
// cross-site POSTs; this stops a web page from pushing or deleting jobs on a
// server its visitor can reach. Clients that send no Origin (curl, SDKs) pass.
// A rebinding page's Origin matches its Host; requireKnownHost stops it.
func (h *handler) rejectCrossOrigin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origins := r.Header.Values("Origin")
		for _, origin := range origins {
			if !sameOrigin(origin, r.Host) {
				writeEnvelope(w, r, http.StatusForbidden, wire.CodeFailure,
					fmt.Sprintf("cross-origin request refused: Origin %q does not match host %q", origin, r.Host), nil)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether the Origin header value names host. The
// scheme's default port is ignored on both sides, since browsers omit it
// from Origin while some clients include it in Host.
func sameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.Scheme == "" || host == "" {
		return false // "null", garbage or a missing Host never match
	}
	return strings.EqualFold(withoutDefaultPort(u.Scheme, u.Host), withoutDefaultPort(u.Scheme, host))
}

func withoutDefaultPort(scheme, host string) string {
	switch strings.ToLower(scheme) {
	case "http":
		return strings.TrimSuffix(host, ":80")
	case "https":
		return strings.TrimSuffix(host, ":443")
	}
	return host
}

// msgForeignHost is the answer to a browser request refused by
// requireKnownHost; %q is its Host. Only a server without auth_token gives
// it: with one, a browser without the token gets 401 first.
const msgForeignHost = "browser request to host %q refused: without auth_token, web pages may call the API only " +
	"through an IP address, localhost or a name listed in allowed_hosts (this stops DNS rebinding)"

// requireKnownHost answers 403 to a request from a browser whose Host is not
// a name the server is meant to be reached by (see hostAllowList). New puts
// it only on a server without auth_token: with one, requireToken lets
// through only requests carrying the token, which a rebinding page does not
// have, so the Host need not be checked.
//
// rejectCrossOrigin compares Origin with Host, and both come from the
// browser: a page on rebind.example whose name is later pointed at
// 127.0.0.1 sends Host: rebind.example and the matching Origin, and passes.
// Only the Host tells such a request apart, since a page can never choose
// it: it is the name the page itself was loaded from. Clients that are not
// browsers send neither Origin nor Sec-Fetch-Site and are served by any name,
// as before; DNS rebinding needs a browser. The token is the defence where
// one is set: a rebinding page does not have it.
func (h *handler) requireKnownHost(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if fromBrowser(r) && !h.hosts.allows(r.Host) {
			writeEnvelope(w, r, http.StatusForbidden, wire.CodeFailure, fmt.Sprintf(msgForeignHost, r.Host), nil)
			return
		}
		next(w, r)
	}
}

// fromBrowser reports whether a request comes from a browser: browsers send
// Origin on every POST and Sec-Fetch-Site on every request to a secure
// context (https, localhost or a loopback address). The keys are indexed in their
// canonical form, which both servers store, so the API's own clients pay
// two map lookups.
func fromBrowser(r *http.Request) bool {
	return len(r.Header["Origin"]) > 0 || len(r.Header["Sec-Fetch-Site"]) > 0
}

// hostAllowList holds the names of allowed_hosts, lower case and without a
// trailing dot. It allows a Host (port or not) that is one of them, an IP
// literal, localhost or a name under .localhost.
//
// An IP literal cannot be rebound: a page whose origin is an IP address was
// served from that address. Browsers resolve localhost and *.localhost to
// loopback themselves (RFC 6761), without asking DNS, so no other site can
// be served under those names either.
type hostAllowList map[string]struct{}

func newHostAllowList(names []string) hostAllowList {
	l := make(hostAllowList, len(names))
	for _, name := range names {
		l[canonicalHostName(name)] = struct{}{}
	}
	return l
}

func (l hostAllowList) allows(host string) bool {
	name := hostWithoutPort(host)
	if inner, bracketed := strings.CutPrefix(name, "["); bracketed {
		inner, closed := strings.CutSuffix(inner, "]")
		addr, err := netip.ParseAddr(inner)
		return closed && err == nil && addr.Is6()
	}
	name = canonicalHostName(name)
	if _, err := netip.ParseAddr(name); err == nil {
		return true
	}
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return true
	}
	_, listed := l[name]
	return listed
}

// hostWithoutPort returns a Host header value without its port, if it has
// one. The colons of an IPv6 literal are inside brackets.
func hostWithoutPort(host string) string {
	i := strings.LastIndexByte(host, ':')
	if i < 0 || strings.IndexByte(host[i+1:], ']') >= 0 {
		return host
	}
	if !strings.HasPrefix(host, "[") && strings.IndexByte(host[:i], ':') >= 0 {
		return host // colons but no brackets: no port to cut
	}
	for _, ch := range host[i+1:] {
		if ch < '0' || ch > '9' {
			return host
		}
	}
	return host[:i]
}

// canonicalHostName is a DNS name as hostAllowList compares it: lower case
// (names are case-insensitive) and without the trailing dot of an absolute
// name ("localhost." is localhost).
func canonicalHostName(name string) string {
	return strings.ToLower(strings.TrimSuffix(name, "."))
}

// rejectUnroutable answers the requests the mux would otherwise answer
// itself in plain text: CONNECT (routed by host, not path) and paths that are
// not clean ("//push", "/./push"), which the mux redirects.
func (h *handler) rejectUnroutable(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect {
			if method, ok := h.methodOf[r.URL.Path]; ok {
				h.methodNotAllowed(method)(w, r)
			} else {
				h.notFound(w, r)
			}
			return
		}
		if !isCleanPath(r.URL.EscapedPath()) {
			h.notFound(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// isCleanPath reports whether p is an absolute path that path.Clean leaves
// alone, apart from a trailing slash.
func isCleanPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	cleaned := path.Clean(p)
	if strings.HasSuffix(p, "/") && cleaned != "/" {
		cleaned += "/"
	}
	return cleaned == p
}

// methodNotAllowed answers a routed path asked with another method than
// allowed. The API takes POST with a JSON body; the GET endpoints (health,
// metrics, pages) also take HEAD.
func (h *handler) methodNotAllowed(allowed string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if allowed == http.MethodGet {
			w.Header().Set("Allow", "GET, HEAD")
			writeEnvelope(w, r, http.StatusMethodNotAllowed, wire.CodeFailure,
				fmt.Sprintf("method %s is not allowed on %s: use GET", r.Method, r.URL.Path), nil)
			return
		}
		w.Header().Set("Allow", http.MethodPost)
		writeEnvelope(w, r, http.StatusMethodNotAllowed, wire.CodeFailure,
			fmt.Sprintf("method %s is not allowed on %s: use POST with a JSON body", r.Method, r.URL.Path), nil)
	}
}

// root answers GET / with what the server serves, for whoever opens it in
// a browser.
func (h *handler) root(w http.ResponseWriter, r *http.Request) {
	message := "delay-queue: the API is POST " + h.endpoints
	if h.opts.UI != nil {
		message += "; the dashboard is at /ui/"
	}
	succeed(w, r, message, nil)
}

func (h *handler) notFound(w http.ResponseWriter, r *http.Request) {
	writeEnvelope(w, r, http.StatusNotFound, wire.CodeFailure,
		fmt.Sprintf("unknown path %q: the endpoints are %s", r.URL.Path, h.endpoints), nil)
}
