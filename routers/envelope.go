package routers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/wire"
)

// Generic answers: internal detail goes to the log, not to the client.
const (
	msgInternalError    = "internal error"
	msgRedisUnavailable = "redis unavailable, try again"
	msgRedisFull        = "redis is out of memory (maxmemory), try again later"
	// msgPartlyDone: failed of total jobs or ids were not handled (done: what
	// was done to the others), and the whole batch may be sent again.
	msgPartlyDone      = "%d of %d not %s: %s; %s the whole batch again is safe"
	msgShuttingDown    = "server is shutting down, try again"
	msgStarting        = "server is starting (moving jobs to the current layout), try again"
	msgLayoutChanged   = "this server's partition layout is out of date (the jobs were repartitioned): try another server; it must be restarted with the recorded bucket_size"
	msgRequestCanceled = "request canceled"
	msgTooManyHeldPops = "too many held pops on this server (max_held_pops = %d), try again or another server"
	msgNotReplicated   = "not confirmed by enough redis replicas (wait_replicas), try again"
)

// Answers to the engine's refusals of a state change.
const (
	msgJobNotFound   = wire.MsgJobNotFound
	msgJobDead       = wire.MsgJobDead
	msgNotReserved   = wire.MsgNotReserved
	msgStaleDelivery = wire.MsgStaleDelivery + ": the attempt is not the job's current delivery"
	// msgStaleAttempt names the attempt the request sent.
	msgStaleAttempt = wire.MsgStaleDelivery + ": attempt %d is not the job's current delivery"
	msgWebhookJob   = "job is a webhook job: the server releases it when its call fails"
)

// writeEnvelope writes every answer but those of the raw routes (the
// metrics, the UI's pages), which write their own and are recorded by
// recordRawAnswer. It writes at most once per request, so a handler that
// panics after answering is not answered twice.
func writeEnvelope(w http.ResponseWriter, r *http.Request, status, code int, message string, data any) {
	rec := recordOf(r)
	if rec.written {
		return
	}
	rec.written = true
	rec.status, rec.code = status, code
	armWriteDeadline(w, rec.writeTimeout)
	if code != wire.CodeSuccess {
		rec.message = message
	}

	body, ok := appendPlainEnvelope(rec.body[:0], code, message, data)
	if !ok {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false) // bodies stay readable; the content type is JSON, not HTML
		if err := enc.Encode(wire.Envelope[any]{Code: code, Message: message, Data: data}); err != nil {
			// Only the data can fail to encode; answer without it.
			buf.Reset()
			_ = enc.Encode(wire.Envelope[any]{Code: wire.CodeFailure, Message: msgInternalError})
			rec.code = wire.CodeFailure
		}
		body = buf.Bytes()
	}
	// The four values share the record's array: no allocation.
	values := &rec.values
	*values = [4]string{"application/json; charset=utf-8", strconv.Itoa(len(body)), "nosniff", "no-store"}
	header := w.Header()
	header["Content-Type"] = values[0:1:1]
	header["Content-Length"] = values[1:2:2]
	header["X-Content-Type-Options"] = values[2:3:3]
	header["Cache-Control"] = values[3:4:4]
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// appendPlainEnvelope appends the common answers, with no data or a single
// delivery (see appendPlainDelivery) and a plain message, in the bytes the
// JSON encoder would write, without its reflection. ok false leaves the
// answer to the encoder.
func appendPlainEnvelope(b []byte, code int, message string, data any) (_ []byte, ok bool) {
	if !isPlainJSONText(message) {
		return b, false
	}
	b = append(b, `{"code":`...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, `,"message":"`...)
	b = append(b, message...)
	b = append(b, `","data":`...)
	switch d := data.(type) {
	case nil:
		b = append(b, "null"...)
	case wire.Delivery:
		if b, ok = appendPlainDelivery(b, d); !ok {
			return b, false
		}
	default:
		return b, false
	}
	return append(b, "}\n"...), true
}

// isPlainJSONText reports whether s needs no escaping in a JSON string:
// printable ASCII without quotes or backslashes.
func isPlainJSONText(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}

func succeed(w http.ResponseWriter, r *http.Request, message string, data any) {
	writeEnvelope(w, r, http.StatusOK, wire.CodeSuccess, message, data)
}

// fail answers code 1 with status 200: the original's clients treat any
// other status as a transport failure and would lose the message.
func fail(w http.ResponseWriter, r *http.Request, message string) {
	writeEnvelope(w, r, http.StatusOK, wire.CodeFailure, message, nil)
}

// failWithData answers code 1 with details in data, such as the bad jobs
// of a batch.
func failWithData(w http.ResponseWriter, r *http.Request, message string, data any) {
	writeEnvelope(w, r, http.StatusOK, wire.CodeFailure, message, data)
}

// armWriteDeadline gives the answer being written d from now (none for d
// = 0). net/http's WriteTimeout runs from the end of the request's head,
// which would cut the answer to a slow body, a held /pop or a call that
// waited on Redis; so writeEnvelope sets it again as it writes. (The fast
// path's writer has no such method: it sets the deadline itself when it
// writes. No middleware wraps the writer, so the method is looked for on
// it directly, without a ResponseController's allocation.)
func armWriteDeadline(w http.ResponseWriter, d time.Duration) {
	if deadline, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok && d > 0 {
		_ = deadline.SetWriteDeadline(time.Now().Add(d))
	}
}

// partFailure is why some items of a batch were not handled, as the
// batch's message says it, and the message of each such item.
func partFailure(err error) (reason, itemMessage string) {
	switch {
	case errors.Is(err, delayqueue.ErrRedisFull):
		return "part of redis is out of memory (maxmemory)", msgRedisFull
	case errors.Is(err, delayqueue.ErrNotReplicated):
		return "part of redis did not confirm them to enough replicas (wait_replicas)", msgNotReplicated
	}
	return "part of redis is unavailable", msgRedisUnavailable
}

// partVerb is the verb of a batch's message for the items partFailure
// explains: done (stored, finished, deleted), or "confirmed" when the
// change was made on the primary and not confirmed by its replicas.
func partVerb(err error, done string) string {
	if errors.Is(err, delayqueue.ErrNotReplicated) {
		return "confirmed"
	}
	return done
}

// failureAttrs are the attributes failQueue logs a failure with. They are
// built only for the failures it logs: the refusals and the overload it
// answers per request are not.
func failureAttrs(r *http.Request, op string, err error) []slog.Attr {
	rec := recordOf(r)
	attrs := []slog.Attr{slog.String("op", op), slog.String(logKeyErr, err.Error())}
	if rec.topic != "" {
		attrs = append(attrs, slog.String(logKeyTopic, rec.topic))
	}
	if rec.jobID != "" {
		attrs = append(attrs, slog.String(logKeyJobID, rec.jobID))
	}
	return attrs
}

// failQueue maps an engine error to an answer. Only the engine's sentinel
// errors reach the client as such; anything else is logged and answered
// generically.
func (h *handler) failQueue(w http.ResponseWriter, r *http.Request, op string, err error) {
	ctx := r.Context()
	switch {
	case errors.Is(err, delayqueue.ErrTooManyWaiters):
		// Not logged beyond the request line: under overload this happens
		// per request; the held-pops metric shows it.
		fail(w, r, fmt.Sprintf(msgTooManyHeldPops, h.opts.MaxHeldPops))
	case errors.Is(err, delayqueue.ErrNotReplicated):
		// Redis made the change but could not confirm its copy: the client
		// retries, which at-least-once tolerates.
		h.logger.LogAttrs(ctx, slog.LevelWarn, "change not replicated in time", failureAttrs(r, op, err)...)
		fail(w, r, msgNotReplicated)
	case errors.Is(err, delayqueue.ErrLayout):
		// Logged once by the engine when it saw the change.
		fail(w, r, msgLayoutChanged)
	case errors.Is(err, delayqueue.ErrStarting):
		// Redis answers: the engine is still moving older layouts' jobs
		// (see /readyz). The request line says so; no warning per request.
		fail(w, r, msgStarting)
	case errors.Is(err, delayqueue.ErrUnavailable):
		// The engine logs an outage once when it starts and once when it
		// ends; the request line says this request failed. Its detail is
		// for debugging.
		h.logger.LogAttrs(ctx, slog.LevelDebug, "redis unavailable", failureAttrs(r, op, err)...)
		fail(w, r, msgRedisUnavailable)
	case errors.Is(err, delayqueue.ErrRedisFull):
		// An operator must act: at error level, as Redis' own words.
		h.logger.LogAttrs(ctx, slog.LevelError, "redis is out of memory", failureAttrs(r, op, err)...)
		fail(w, r, msgRedisFull)
	case errors.Is(err, delayqueue.ErrInvalidJob):
		// The engine's own validation; its message says what is wrong.
		fail(w, r, err.Error())
	case errors.Is(err, delayqueue.ErrClosed):
		fail(w, r, msgShuttingDown)
	// The refusals say what the job's state forbids; the request was fine,
	// so they are not logged beyond the request line.
	case errors.Is(err, delayqueue.ErrNotFound):
		fail(w, r, msgJobNotFound)
	case errors.Is(err, delayqueue.ErrDead):
		fail(w, r, msgJobDead)
	case errors.Is(err, delayqueue.ErrNotReserved):
		fail(w, r, msgNotReserved)
	case errors.Is(err, delayqueue.ErrStaleDelivery):
		fail(w, r, msgStaleDelivery)
	case errors.Is(err, delayqueue.ErrWebhookJob):
		fail(w, r, msgWebhookJob)
	case ctx.Err() != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		// The client went away; nobody reads this answer.
		h.logger.LogAttrs(ctx, slog.LevelDebug, "request canceled by the client", failureAttrs(r, op, err)...)
		fail(w, r, msgRequestCanceled)
	default:
		h.logger.LogAttrs(ctx, slog.LevelError, "queue operation failed", failureAttrs(r, op, err)...)
		fail(w, r, msgInternalError)
	}
}
