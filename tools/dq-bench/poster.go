package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"time"
)

// poster sends one POST with a JSON body and returns the answer's status
// and body. The load tool has two: net/http's client, and a lean HTTP/1.1
// client that costs the shared machine far less CPU per request (the tool,
// the server and Redis share two cores, so every microsecond the tool
// spends is taken from the server it measures).
//
// hold says the server may hold the request (a /pop with a timeout): only
// then must a cancelled ctx end it while it waits.
type poster interface {
	post(ctx context.Context, path string, payload []byte, hold bool) (int, []byte, error)
	close()
}

// HTTP client kinds of the -http-client flag.
const (
	clientLean = "lean"
	clientStd  = "std"
)

// wroteHookKey carries a function a poster calls once a request is
// written (see withWroteHook).
type wroteHookKey struct{}

// withWroteHook returns ctx with fn attached: both posters call it when the
// request has been written to the connection.
func withWroteHook(ctx context.Context, fn func()) context.Context {
	return context.WithValue(ctx, wroteHookKey{}, fn)
}

func wroteHook(ctx context.Context) func() {
	fn, _ := ctx.Value(wroteHookKey{}).(func())
	return fn
}

func newPoster(kind, baseURL string, maxConns int) (poster, error) {
	switch kind {
	case clientLean:
		return newLeanPoster(baseURL, maxConns)
	case clientStd:
		return newStdPoster(baseURL, maxConns), nil
	}
	return nil, fmt.Errorf("unknown HTTP client %q (want %s or %s)", kind, clientLean, clientStd)
}

// stdPoster is net/http's client with a transport that keeps up to
// maxConns idle connections, so N concurrent goroutines reuse N
// connections instead of dialing per request.
type stdPoster struct {
	baseURL string
	http    *http.Client
}

func newStdPoster(baseURL string, maxConns int) *stdPoster {
	transport := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	return &stdPoster{baseURL: baseURL, http: &http.Client{Transport: transport}}
}

func (p *stdPoster) close() { p.http.CloseIdleConnections() }

func (p *stdPoster) post(ctx context.Context, path string, payload []byte, _ bool) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.baseURL+path, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if hook := wroteHook(ctx); hook != nil {
		req = req.WithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { hook() },
		}))
	}
	resp, err := p.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("read answer: %w", err)
	}
	return resp.StatusCode, raw, nil
}

// leanPoster is a minimal HTTP/1.1 client in the manner of wrk: one request
// at a time per keep-alive connection, connections kept in a pool of up to
// maxConns idle ones. It reads answers framed by Content-Length or chunked
// transfer coding, and drops a connection the server asks to close or that
// failed in any way.
type leanPoster struct {
	addr string
	host string
	idle chan *leanConn
}

type leanConn struct {
	conn net.Conn
	r    *bufio.Reader
	buf  []byte // the request being written, reused
	// deadline is the one the next request wants; deadlineSet the one
	// the connection has (zero: none).
	deadline, deadlineSet time.Time
}

func newLeanPoster(baseURL string, maxConns int) (*leanPoster, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("server URL: %w", err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("server URL %q: the lean client speaks plain http only (use -http-client std)", baseURL)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	return &leanPoster{addr: addr, host: u.Host, idle: make(chan *leanConn, maxConns)}, nil
}

func (p *leanPoster) close() {
	for {
		select {
		case c := <-p.idle:
			c.conn.Close()
		default:
			return
		}
	}
}

func (p *leanPoster) get(ctx context.Context) (*leanConn, error) {
	select {
	case c := <-p.idle:
		return c, nil
	default:
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	return &leanConn{conn: conn, r: bufio.NewReaderSize(conn, 16<<10)}, nil
}

func (p *leanPoster) put(c *leanConn) {
	select {
	case p.idle <- c:
	default:
		c.conn.Close()
	}
}

// shortRequestLimit bounds a request the server answers at once; its
// connection deadline is renewed only when less than half of it is left,
// sparing a deadline change per request.
const shortRequestLimit = time.Minute

func (p *leanPoster) post(ctx context.Context, path string, payload []byte, hold bool) (int, []byte, error) {
	if err := ctx.Err(); err != nil {
		return 0, nil, err
	}
	c, err := p.get(ctx)
	if err != nil {
		return 0, nil, err
	}
	deadline, hasDeadline := ctx.Deadline()
	switch {
	case hasDeadline || hold:
		c.deadline = deadline // zero: none
	case time.Until(c.deadline) < shortRequestLimit/2:
		c.deadline = time.Now().Add(shortRequestLimit)
	}
	if !c.deadline.Equal(c.deadlineSet) {
		if err := c.conn.SetDeadline(c.deadline); err != nil {
			c.conn.Close()
			return 0, nil, err
		}
		c.deadlineSet = c.deadline
	}
	stop := func() bool { return true }
	if hold {
		// A cancelled ctx ends a held request at once.
		stop = context.AfterFunc(ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	}
	status, body, keep, err := c.roundTrip(p.host, path, payload, wroteHook(ctx))
	cancelled := !stop()
	if err != nil || !keep || cancelled {
		c.conn.Close()
		if err != nil {
			if cancelled {
				err = fmt.Errorf("%w (%v)", ctx.Err(), err)
			}
			return 0, nil, err
		}
		return status, body, nil
	}
	p.put(c)
	return status, body, nil
}

// roundTrip writes one request and reads its answer. keep is false when
// the connection must not be reused.
func (c *leanConn) roundTrip(host, path string, payload []byte, wrote func()) (status int, body []byte, keep bool, err error) {
	b := c.buf[:0]
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(payload)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, payload...)
	c.buf = b
	if _, err := c.conn.Write(b); err != nil {
		return 0, nil, false, err
	}
	if wrote != nil {
		wrote()
	}
	return readResponse(c.r)
}

var errMalformedAnswer = errors.New("malformed HTTP answer")

// readResponse reads one HTTP/1.1 answer (skipping 1xx ones) from r.
func readResponse(r *bufio.Reader) (status int, body []byte, keep bool, err error) {
	for {
		status, length, chunked, keep, err := readHead(r)
		if err != nil {
			return 0, nil, false, err
		}
		if status >= 100 && status < 200 {
			continue
		}
		switch {
		case chunked:
			body, err = readChunked(r)
		case length >= 0:
			body = make([]byte, length)
			_, err = io.ReadFull(r, body)
		default:
			// Neither length nor chunks: the body runs to the close.
			body, err = io.ReadAll(r)
			keep = false
		}
		if err != nil {
			return status, nil, false, fmt.Errorf("read answer body: %w", err)
		}
		return status, body, keep, nil
	}
}

// readHead reads a status line and headers. length is -1 when the answer
// gives no Content-Length.
func readHead(r *bufio.Reader) (status int, length int64, chunked, keep bool, err error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return 0, 0, false, false, fmt.Errorf("read status line: %w", err)
	}
	// "HTTP/1.1 200 OK\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, 0, false, false, fmt.Errorf("%w: status line %q", errMalformedAnswer, line)
	}
	status, err = strconv.Atoi(string(line[9:12]))
	if err != nil {
		return 0, 0, false, false, fmt.Errorf("%w: status line %q", errMalformedAnswer, line)
	}
	keep = line[7] == '1' // HTTP/1.1 keeps the connection unless told not to
	length = -1
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return 0, 0, false, false, fmt.Errorf("read headers: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			return status, length, chunked, keep, nil
		}
		name, value, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return 0, 0, false, false, fmt.Errorf("%w: header %q", errMalformedAnswer, line)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.ParseInt(string(value), 10, 64)
			if err != nil || length < 0 {
				return 0, 0, false, false, fmt.Errorf("%w: Content-Length %q", errMalformedAnswer, value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			} else if bytes.EqualFold(value, []byte("keep-alive")) {
				keep = true
			}
		}
	}
}

// readChunked reads a chunked body and its trailer.
func readChunked(r *bufio.Reader) ([]byte, error) {
	var body []byte
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%w: chunk size %q", errMalformedAnswer, line)
		}
		if n == 0 {
			for { // trailer, up to the empty line
				line, err := r.ReadSlice('\n')
				if err != nil {
					return nil, err
				}
				if len(bytes.TrimRight(line, "\r\n")) == 0 {
					return body, nil
				}
			}
		}
		start := len(body)
		body = append(body, make([]byte, n)...)
		if _, err := io.ReadFull(r, body[start:]); err != nil {
			return nil, err
		}
		if crlf, err := r.ReadSlice('\n'); err != nil || len(bytes.TrimRight(crlf, "\r\n")) != 0 {
			return nil, fmt.Errorf("%w: no CRLF after a chunk", errMalformedAnswer)
		}
	}
}
