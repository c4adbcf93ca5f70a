package http1

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// A connection's state, as Shutdown sees it.
const (
	// stateIdle: waiting for the next request; Shutdown may close it.
	stateIdle int32 = iota
	// stateActive: a request is being read, handled or answered.
	stateActive
	// stateClosed: closed by Shutdown while idle.
	stateClosed
)

type conn struct {
	srv    *Server
	rwc    net.Conn
	remote string
	state  atomic.Int32

	br *bufio.Reader
	bw *bufio.Writer
	// body and reply are reused from request to request: a handler reads
	// the body during its call and its answer is written before the next.
	// So are the request's header map and values, the body's reader and the
	// response writer, which no handler keeps past its return.
	body     []byte
	reply    []byte
	header   http.Header
	values   []string
	bodyRead bodyReader
	response responseWriter
	held     heldWatch
	// writeBy is the write deadline set last (see armWrite).
	writeBy time.Time
}

func newConn(s *Server, rwc net.Conn) *conn {
	c := &conn{srv: s, rwc: rwc, remote: rwc.RemoteAddr().String()}
	c.held.c = c
	return c
}

// request is what parseHead takes from a request head.
type request struct {
	path   string
	holds  bool
	header http.Header
	host   string
	length int64
	close  bool
}

func (c *conn) serve() {
	handedOff := false
	defer func() {
		if p := recover(); p != nil && p != http.ErrAbortHandler {
			c.srv.logger().Error("http: panic serving a request", "remote", c.remote,
				"panic", p, "stack", string(debug.Stack()))
		}
		c.srv.forget(c)
		if !handedOff {
			_ = c.rwc.Close()
		}
	}()
	c.br = bufio.NewReaderSize(c.rwc, readBufferSize)
	c.bw = bufio.NewWriterSize(c.rwc, 4096)
	for first := true; ; first = false {
		c.state.Store(stateIdle)
		if c.srv.closing.Load() {
			return
		}
		if first {
			c.setReadTimeout(c.srv.ReadHeaderTimeout)
		} else {
			c.setReadTimeout(c.srv.IdleTimeout)
		}
		if !c.awaitRequest() {
			return
		}
		if !c.state.CompareAndSwap(stateIdle, stateActive) {
			return // closed by Shutdown as the request arrived
		}
		if !first && endOfHead(c.buffered()) == 0 {
			// The head is not all here: it gets ReadHeaderTimeout. (When
			// it is, as usual, the deadline calls are spared.)
			c.setReadTimeout(c.srv.ReadHeaderTimeout)
		}
		head, err := c.readHead()
		if err != nil {
			return
		}
		req, ok := c.parseHead(head)
		if !ok {
			// Not one of ours: net/http reads this request, and every
			// later one, from the bytes still buffered.
			c.srv.forget(c)
			if !c.writeBy.IsZero() {
				_ = c.rwc.SetWriteDeadline(time.Time{}) // net/http sets its own
			}
			handedOff = c.srv.handOff(&bufferedConn{Conn: c.rwc, r: c.br})
			return
		}
		if _, err := c.br.Discard(len(head)); err != nil {
			return
		}
		if !c.handle(req) {
			return
		}
	}
}

// armWrite gives the answer about to be written WriteTimeout: at least
// half of it, since the deadline is moved only once less than half is
// left, which spares a deadline call on most requests of a busy
// connection.
func (c *conn) armWrite() {
	d := c.srv.WriteTimeout
	if d <= 0 {
		return
	}
	now := time.Now()
	if c.writeBy.Sub(now) < d/2 {
		c.writeBy = now.Add(d)
		_ = c.rwc.SetWriteDeadline(c.writeBy)
	}
}

// setReadTimeout sets the read deadline d from now, or none for d = 0.
func (c *conn) setReadTimeout(d time.Duration) {
	if d > 0 {
		_ = c.rwc.SetReadDeadline(time.Now().Add(d))
	} else {
		_ = c.rwc.SetReadDeadline(time.Time{})
	}
}

// awaitRequest waits for the first byte of the next request; false means
// the connection ended first. Empty lines before a request are skipped, as
// RFC 9112 (2.2) asks and net/http does: a client that ends a body with
// CRLF sends one. They count against the deadline of the wait, like the
// head's own bytes.
func (c *conn) awaitRequest() bool {
	for {
		next, err := c.br.Peek(1)
		if err != nil {
			return false
		}
		if next[0] != '\r' && next[0] != '\n' {
			return true
		}
		buf := c.buffered()
		n := 0
		for n < len(buf) && (buf[n] == '\r' || buf[n] == '\n') {
			n++
		}
		_, _ = c.br.Discard(n)
	}
}

// buffered returns the bytes read and not yet consumed.
func (c *conn) buffered() []byte {
	buf, _ := c.br.Peek(c.br.Buffered())
	return buf
}

// readHead returns the buffered bytes of the next request head, up to and
// including the empty line that ends it, without consuming them. A head
// that does not fit in the buffer comes back empty, for net/http.
func (c *conn) readHead() ([]byte, error) {
	for {
		buf := c.buffered()
		if n := endOfHead(buf); n > 0 {
			return buf[:n], nil
		}
		if len(buf) == c.br.Size() {
			return nil, nil
		}
		if _, err := c.br.Peek(len(buf) + 1); err != nil {
			return nil, err
		}
	}
}

// endOfHead returns the length of the head at the start of buf, up to the
// first empty line (CRLF or a bare LF), or 0 when it is not all there.
func endOfHead(buf []byte) int {
	for i := 0; i < len(buf); {
		j := bytes.IndexByte(buf[i:], '\n')
		if j < 0 {
			return 0
		}
		i += j + 1
		switch {
		case i < len(buf) && buf[i] == '\n':
			return i + 1
		case i+1 < len(buf) && buf[i] == '\r' && buf[i+1] == '\n':
			return i + 2
		}
	}
	return 0
}

// parseHead reads head if it is a request taken here; false hands it to
// net/http unread.
func (c *conn) parseHead(head []byte) (request, bool) {
	var req request
	line, rest, ok := cutLine(head)
	if !ok {
		return req, false
	}
	target, ok := bytes.CutPrefix(line, []byte("POST "))
	if !ok {
		return req, false
	}
	target, ok = bytes.CutSuffix(target, []byte(" HTTP/1.1"))
	if !ok {
		return req, false
	}
	holds, ok := c.srv.Paths[string(target)]
	if !ok {
		return req, false
	}
	// The path and every value are substrings of one copy of the head, and
	// the value slices share one array: a handful of allocations per
	// request fewer.
	text := string(head)
	substring := func(b []byte) string {
		if len(b) == 0 {
			return ""
		}
		at := cap(head) - cap(b) // b is a subslice of head
		return text[at : at+len(b)]
	}
	req.path, req.holds = substring(target), holds
	if c.header == nil {
		c.header = make(http.Header, 8)
	}
	clear(c.header)
	req.header = c.header
	c.values = c.values[:0]
	sawLength := false
	for {
		line, rest, ok = cutLine(rest)
		if !ok {
			return req, false
		}
		if len(line) == 0 {
			break
		}
		colon := bytes.IndexByte(line, ':')
		if colon <= 0 || !isToken(line[:colon]) {
			return req, false // also a folded line, which starts with a space
		}
		value := bytes.Trim(line[colon+1:], " \t")
		if !isFieldValue(value) {
			return req, false
		}
		key := canonicalKey(line[:colon])
		switch key {
		case "Host":
			if req.host != "" || len(value) == 0 || !isHost(value) {
				return req, false
			}
			req.host = substring(value)
			continue // net/http keeps Host out of Header too
		case "Content-Length":
			n, ok := parseLength(value)
			if sawLength || !ok || n > c.srv.maxBody() {
				return req, false
			}
			sawLength, req.length = true, n
		case "Connection":
			closes, other := connectionTokens(value)
			if other {
				return req, false
			}
			req.close = req.close || closes
		case "Transfer-Encoding", "Expect", "Upgrade", "Trailer":
			return req, false
		}
		if earlier, ok := req.header[key]; ok {
			req.header[key] = append(earlier, substring(value))
			continue
		}
		c.values = append(c.values, substring(value))
		n := len(c.values)
		req.header[key] = c.values[n-1 : n : n]
	}
	if req.host == "" {
		return req, false // net/http answers 400
	}
	return req, true
}

// handle reads the body, runs the handler and writes its answer. False
// means the connection is done.
func (c *conn) handle(req request) bool {
	// A body still arriving gets ReadBodyTimeout, from now; the handler
	// runs under what is left of it, as it reads nothing, and the next
	// request's wait sets its own. A body all buffered, as usual, needs no
	// read, so then no deadline is changed (the watcher of a held request
	// clears it when it starts).
	if int64(c.br.Buffered()) < req.length {
		c.setReadTimeout(c.srv.ReadBodyTimeout)
	}
	// A body cut short (its deadline passed, its client gone) is handed to
	// the handler as net/http hands it: the bytes that came, then the
	// error, so that the handler answers it (408 for a deadline) as it
	// would there. The connection is closed after the answer: what is left
	// of the body must not be read as a request.
	var body io.ReadCloser = http.NoBody
	var bodyErr error
	if req.length > 0 {
		bodyErr = c.readBody(int(req.length))
		c.bodyRead.reset(c.body, bodyErr)
		body = &c.bodyRead
	}

	// The request and its URL in one allocation.
	both := &struct {
		r http.Request
		u url.URL
	}{u: url.URL{Path: req.path}}
	r := &both.r
	*r = http.Request{
		Method:        http.MethodPost,
		URL:           &both.u,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        req.header,
		Body:          body,
		ContentLength: req.length,
		Close:         req.close,
		Host:          req.host,
		RemoteAddr:    c.remote,
		RequestURI:    req.path,
	}
	if c.response.header == nil {
		c.response.header = make(http.Header, 4)
	}
	clear(c.response.header)
	w := &c.response
	w.status, w.body = 0, c.reply[:0]
	if req.holds && bodyErr == nil {
		// Whatever is buffered behind it (a CRLF, a pipelined request),
		// the client may still leave: the watch reads on to see it go.
		ctx, cancel := context.WithCancel(context.Background())
		c.held.begin(cancel)
		c.srv.Handler.ServeHTTP(w, r.WithContext(ctx))
		c.held.end()
		cancel()
	} else {
		c.srv.Handler.ServeHTTP(w, r)
	}
	if cap(w.body) <= maxKeptReply {
		c.reply = w.body // a rare large answer is not kept per connection
	}
	closing := req.close || bodyErr != nil || c.srv.closing.Load()
	for _, v := range w.header["Connection"] {
		closes, _ := connectionTokens([]byte(v))
		closing = closing || closes
	}
	c.armWrite()
	if err := c.writeResponse(w, closing); err != nil {
		return false
	}
	// Flushed at once, as net/http does, even with a pipelined request
	// already buffered: that one may hold or wait for the rest of its bytes.
	if c.bw.Flush() != nil {
		return false
	}
	return !closing
}

// readBody reads a request body of n bytes into c.body, which is kept from
// request to request. A body already buffered (the usual case) is copied
// at once. One still arriving is read as it comes, the buffer growing with
// it (doubling, up to n): a head that claims MaxBody bytes and sends none
// costs a small buffer, not the claim. On error c.body holds the bytes
// that came; a body that ends early is io.ErrUnexpectedEOF, as in
// net/http.
func (c *conn) readBody(n int) error {
	if c.br.Buffered() >= n {
		if cap(c.body) < n {
			c.body = make([]byte, n)
		}
		c.body = c.body[:n]
		_, err := io.ReadFull(c.br, c.body)
		return err
	}
	c.body = c.body[:0]
	for len(c.body) < n {
		if len(c.body) == cap(c.body) {
			grown := make([]byte, len(c.body), min(n, max(2*cap(c.body), readBufferSize)))
			copy(grown, c.body)
			c.body = grown
		}
		read, err := c.br.Read(c.body[len(c.body):min(cap(c.body), n)])
		c.body = c.body[:len(c.body)+read]
		if err == io.EOF && len(c.body) < n {
			return io.ErrUnexpectedEOF
		}
		if err != nil && len(c.body) < n {
			return err
		}
	}
	return nil
}

// watchDelay is how long a held request runs before its connection is
// watched. Most pops find a job at once and answer well within it, and
// starting a watch costs a goroutine, a system call and two deadline
// changes; a client that leaves is noticed at most this much later. (A
// watch started at once would not beat a pop that finds a job at once
// either: the handler claims the job before the watcher first runs.)
const watchDelay = time.Millisecond

// heldWatch watches a connection for the held request running on it, if
// any, once that request has run for watchDelay (see watch). It is made on
// the connection's first held request and reused for the next ones, so
// that a held request answered before watchDelay costs a timer reset.
type heldWatch struct {
	c     *conn
	timer *time.Timer // runs start

	mu        sync.Mutex
	cancel    context.CancelFunc // of the held request running; nil between them
	stopWatch func()             // of the watch started for it
}

// begin arms the watch for a held request that cancel cancels.
func (w *heldWatch) begin(cancel context.CancelFunc) {
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	if w.timer == nil {
		w.timer = time.AfterFunc(watchDelay, w.start)
		return
	}
	w.timer.Reset(watchDelay)
}

// start watches the connection for the held request running now. A timer
// of an earlier request that fires late finds the next one running, or
// none: either is right.
func (w *heldWatch) start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cancel == nil || w.stopWatch != nil {
		return
	}
	// The handler reads nothing from the connection: the watcher waits on
	// it with no deadline.
	_ = w.c.rwc.SetReadDeadline(time.Time{})
	w.stopWatch = w.c.watch(w.cancel)
}

// end disarms the watch when the held request returns, and stops the
// watcher if it started.
func (w *heldWatch) end() {
	w.timer.Stop()
	w.mu.Lock()
	stop := w.stopWatch
	w.cancel, w.stopWatch = nil, nil
	w.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// watch cancels a held request's context when its client closes or resets
// the connection, until the returned stop is called. While the handler
// runs, nothing else reads the connection: the watcher reads ahead into
// the connection's buffer, so that the bytes of pipelined requests stay
// there, in order, for after the held one, and a close behind them is
// still seen. The read-ahead is bounded by the buffer: once it is full
// the server cannot tell whether the client is still there without
// dropping bytes, so the request is cancelled then too (its answer is
// written, and the buffered requests are served after it).
func (c *conn) watch(cancel context.CancelFunc) (stop func()) {
	var stopping atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			// Peek reads until one more byte is buffered; it fails at end
			// of file, on an error, when stopped (a deadline in the past),
			// and at once when the buffer is full.
			if _, err := c.br.Peek(c.br.Buffered() + 1); err != nil {
				if !stopping.Load() {
					cancel()
				}
				return
			}
		}
	}()
	return func() {
		// A deadline in the past ends the wait; the next request's read
		// sets its own deadline.
		stopping.Store(true)
		_ = c.rwc.SetReadDeadline(time.Unix(1, 0))
		<-done
	}
}

// writeResponse writes w's answer into the connection's buffer: the
// status line, the handler's headers (but Content-Length and Connection,
// which are the connection's), Date, Content-Length and the body.
func (c *conn) writeResponse(w *responseWriter, closing bool) error {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	h := w.header
	delete(h, "Content-Length")
	delete(h, "Transfer-Encoding")
	delete(h, "Connection")
	bodyAllowed := bodyAllowedFor(status)
	if !bodyAllowed {
		w.body = w.body[:0]
	}
	// Sniffed as net/http does: not under a Content-Encoding, whose bytes
	// say nothing of the type.
	if _, ok := h["Content-Type"]; !ok && len(w.body) > 0 && h.Get("Content-Encoding") == "" {
		h.Set("Content-Type", http.DetectContentType(w.body))
	}
	b := c.bw
	_, _ = b.WriteString("HTTP/1.1 ")
	_, _ = b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(status), 10))
	_ = b.WriteByte(' ')
	text := http.StatusText(status)
	if text == "" {
		text = "status code " + strconv.Itoa(status)
	}
	_, _ = b.WriteString(text)
	_, _ = b.WriteString("\r\n")
	if err := h.Write(b); err != nil {
		return err
	}
	if _, ok := h["Date"]; !ok {
		_, _ = b.WriteString("Date: ")
		_, _ = b.Write(time.Now().UTC().AppendFormat(b.AvailableBuffer(), http.TimeFormat))
		_, _ = b.WriteString("\r\n")
	}
	if bodyAllowed {
		_, _ = b.WriteString("Content-Length: ")
		_, _ = b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(len(w.body)), 10))
		_, _ = b.WriteString("\r\n")
	}
	if closing {
		_, _ = b.WriteString("Connection: close\r\n")
	}
	_, _ = b.WriteString("\r\n")
	_, err := b.Write(w.body)
	return err
}

// bodyAllowedFor reports whether an answer with status has a body.
func bodyAllowedFor(status int) bool {
	return !(status >= 100 && status <= 199 || status == http.StatusNoContent || status == http.StatusNotModified)
}

// responseWriter collects a handler's answer; the connection writes it,
// with its length, once the handler returns.
type responseWriter struct {
	header http.Header
	status int
	body   []byte
}

func (w *responseWriter) Header() http.Header { return w.header }

// SetReadDeadline does nothing: the body was read whole before the handler
// ran, so no read is left for a deadline to bound. (With it, a handler's
// http.ResponseController call succeeds instead of making an error.)
func (w *responseWriter) SetReadDeadline(time.Time) error { return nil }

func (w *responseWriter) WriteHeader(status int) {
	if w.status != 0 || status < 200 && status >= 100 {
		return // a second call, or an informational answer: not sent here
	}
	if status < 100 || status > 999 {
		panic("http1: invalid WriteHeader code " + strconv.Itoa(status))
	}
	w.status = status
}

func (w *responseWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	w.body = append(w.body, p...)
	return len(p), nil
}

// bodyReader is a request body read before the handler runs: its bytes,
// then the error that cut it short, if any. It offers Read and Close, as
// net/http's body does, and Len, the bytes left, by which a handler can
// tell that the body is in memory already (routers reads it in one
// allocation then).
type bodyReader struct {
	bytes bytes.Reader
	err   error
}

func (b *bodyReader) reset(body []byte, err error) {
	b.bytes.Reset(body)
	b.err = err
}

func (b *bodyReader) Read(p []byte) (int, error) {
	n, err := b.bytes.Read(p)
	if err == io.EOF && b.err != nil {
		return n, b.err
	}
	return n, err
}

func (b *bodyReader) Len() int { return b.bytes.Len() }

func (*bodyReader) Close() error { return nil }

// bufferedConn is a connection handed to net/http: its reads start with
// the bytes this package had buffered but not consumed.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// cutLine splits off the first line of b, without its CRLF or LF. A CR
// anywhere else in the line makes it invalid.
func cutLine(b []byte) (line, rest []byte, ok bool) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		return nil, nil, false
	}
	line, rest = b[:i], b[i+1:]
	line = bytes.TrimSuffix(line, []byte("\r"))
	return line, rest, bytes.IndexByte(line, '\r') < 0
}

// isToken reports whether b is an RFC 9110 token, as a header name must be.
func isToken(b []byte) bool {
	for _, ch := range b {
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), ch) >= 0:
		default:
			return false
		}
	}
	return len(b) > 0
}

// isFieldValue reports whether b holds no control characters but tabs.
func isFieldValue(b []byte) bool {
	for _, ch := range b {
		if ch < ' ' && ch != '\t' || ch == 0x7f {
			return false
		}
	}
	return true
}

// isHost reports whether b is made of the characters a host[:port] or an
// IPv6 literal uses; anything else goes to net/http, which judges it.
func isHost(b []byte) bool {
	for _, ch := range b {
		switch {
		case 'a' <= ch && ch <= 'z', 'A' <= ch && ch <= 'Z', '0' <= ch && ch <= '9':
		case ch == '.' || ch == '-' || ch == ':' || ch == '[' || ch == ']' || ch == '_':
		default:
			return false
		}
	}
	return true
}

// parseLength reads a Content-Length: decimal digits only.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
	}
	return n, true
}

// canonicalKey returns the canonical form of a header name, without
// allocating for the names API clients usually send.
func canonicalKey(name []byte) string {
	for _, known := range [...]string{
		"Host", "Content-Length", "Content-Type", "User-Agent", "Accept",
		"Accept-Encoding", "Authorization", "Connection",
	} {
		if len(name) == len(known) && bytes.EqualFold(name, []byte(known)) {
			return known
		}
	}
	return http.CanonicalHeaderKey(string(name))
}

// connectionTokens reads a Connection header value: whether it says close,
// and whether it names anything but close and keep-alive.
func connectionTokens(value []byte) (closes, other bool) {
	for token := range bytes.SplitSeq(value, []byte(",")) {
		token = bytes.Trim(token, " \t")
		switch {
		case bytes.EqualFold(token, []byte("close")):
			closes = true
		case !bytes.EqualFold(token, []byte("keep-alive")):
			other = true
		}
	}
	return closes, other
}
