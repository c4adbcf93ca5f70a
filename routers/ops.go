package routers

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/wire"
)

// Answers of the auth check and the probes.
const (
	msgTokenMissing     = "authorization required: send the header Authorization: Bearer <auth_token>"
	msgTokenInvalid     = "invalid token"
	msgNotReady         = "not ready: redis unavailable"
	msgNotReadyStop     = "not ready: server is shutting down"
	msgNotReadyStarting = "not ready: starting, migrating jobs to the current layout"
	msgNotReadyLayout   = "not ready: the jobs were repartitioned; restart this server with the recorded bucket_size"
	// msgReadyStaleLoops starts a ready answer that names stale loops.
	msgReadyStaleLoops = "ready, but background loops are behind: "
)

// tokenChecker compares bearer tokens with the configured one in constant
// time. Both sides are hashed first, so that neither the comparison time
// nor an early return on a length mismatch says anything about the token.
type tokenChecker struct {
	want [sha256.Size]byte
}

func newTokenChecker(token string) *tokenChecker {
	return &tokenChecker{want: sha256.Sum256([]byte(token))}
}

// check reads the Authorization header: ok when it carries the token;
// otherwise presented says whether a bearer token was sent at all.
func (c *tokenChecker) check(header string) (ok, presented bool) {
	scheme, token, found := strings.Cut(strings.TrimSpace(header), " ")
	if !found || !strings.EqualFold(scheme, "Bearer") {
		return false, false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], c.want[:]) == 1, true
}

// requireToken answers 401 (code 1, with a WWW-Authenticate challenge as
// RFC 6750 asks) to a request without the right bearer token, before its
// body is read. Neither the header nor the token is ever logged.
func (h *handler) requireToken(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ok, presented := h.auth.check(r.Header.Get("Authorization"))
		if ok {
			next(w, r)
			return
		}
		if presented {
			w.Header().Set("WWW-Authenticate", `Bearer realm="delay-queue", error="invalid_token"`)
			writeEnvelope(w, r, http.StatusUnauthorized, wire.CodeFailure, msgTokenInvalid, nil)
			return
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="delay-queue"`)
		writeEnvelope(w, r, http.StatusUnauthorized, wire.CodeFailure, msgTokenMissing, nil)
	}
}

// healthz answers 200 while the process serves HTTP: a liveness probe. It
// does not touch Redis, so that an outage of Redis does not get every
// instance restarted.
func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	succeed(w, r, "up", nil)
}

// readyz answers 200 when Redis answers and holds the engine's scripts, and
// 503 otherwise: a readiness probe, for load balancers to route around an
// instance that cannot serve. Stale background loops are named in the
// answer but leave it 200: the instance still serves requests, and what
// stalls one instance's loops (a Redis refusing a command) usually stalls
// every instance's, whose failing probes would take the whole service out
// of the load balancer.
func (h *handler) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), h.opts.ReadyTimeout)
	defer cancel()
	err := h.queue.Ready(ctx)
	if err == nil {
		var data wire.Readiness
		var names []string
		for _, s := range h.queue.LoopHealth() {
			if s.Stale() {
				data.StaleLoops = append(data.StaleLoops, wire.StaleLoop{Loop: s.Loop,
					SecondsBehind: s.Behind.Seconds(), StaleAfterSeconds: s.StaleAfter.Seconds()})
				names = append(names, s.Loop)
			}
		}
		if len(names) == 0 {
			succeed(w, r, "ready", nil)
			return
		}
		succeed(w, r, msgReadyStaleLoops+strings.Join(names, ", "), data)
		return
	}
	// The engine logs the loss and the recovery of Redis once each; a
	// probe every few seconds must not repeat it at info.
	h.logger.LogAttrs(r.Context(), slog.LevelDebug, "readiness check failed", slog.String(logKeyErr, err.Error()))
	message := msgNotReady
	switch {
	case errors.Is(err, delayqueue.ErrClosed):
		message = msgNotReadyStop
	case errors.Is(err, delayqueue.ErrStarting):
		message = msgNotReadyStarting
	case errors.Is(err, delayqueue.ErrLayout):
		message = msgNotReadyLayout
	}
	writeEnvelope(w, r, http.StatusServiceUnavailable, wire.CodeFailure, message, nil)
}

// recordRawAnswer wraps a handler that answers in its own format (metrics
// text, static pages) so that the request log and the metrics still get
// its status: code 1 for anything but 200 and 304.
func recordRawAnswer(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w}
		next(sw, r)
		rec := recordOf(r)
		rec.written = true
		rec.status = sw.status
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		if rec.status != http.StatusOK && rec.status != http.StatusNotModified {
			rec.code = wire.CodeFailure
		}
	}
}

// statusWriter remembers the status a handler that does not write an
// envelope answered with.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
