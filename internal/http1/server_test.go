package http1

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// seen is what the echo handler reports of a request.
type seen struct {
	Via    string
	Method string
	Path   string
	Host   string
	Body   string
	Token  string
	Proto  string
}

// echo answers what it saw of the request, naming which server ran it.
func echo(via string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(seen{Via: via, Method: r.Method, Path: r.URL.Path, Host: r.Host,
			Body: string(body), Token: r.Header.Get("Authorization"), Proto: r.Proto})
	})
}

type testServer struct {
	addr   string
	srv    *Server
	served chan error
}

func startServer(t *testing.T, fast, fallback http.Handler, paths map[string]bool, adjust ...func(*Server)) *testServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{
		addr: l.Addr().String(),
		srv: &Server{
			Handler:           fast,
			Fallback:          &http.Server{Handler: fallback, ReadHeaderTimeout: 5 * time.Second},
			Paths:             paths,
			MaxBody:           1024,
			ReadHeaderTimeout: 5 * time.Second,
		},
		served: make(chan error, 1),
	}
	for _, f := range adjust {
		f(ts.srv)
	}
	go func() { ts.served <- ts.srv.Serve(l) }()
	t.Cleanup(func() {
		_ = ts.srv.Close()
		select {
		case <-ts.served:
		case <-time.After(5 * time.Second):
			t.Error("Serve did not return after Close")
		}
	})
	return ts
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// roundTrip sends raw and reads one answer.
func roundTrip(t *testing.T, c net.Conn, br *bufio.Reader, raw string) (*http.Response, seen) {
	t.Helper()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	return readAnswer(t, br)
}

func readAnswer(t *testing.T, br *bufio.Reader) (*http.Response, seen) {
	t.Helper()
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer body: %v", err)
	}
	var s seen
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, &s); err != nil {
			t.Fatalf("answer %q: %v", body, err)
		}
	}
	return resp, s
}

func post(path, body string, headers ...string) string {
	return fmt.Sprintf("POST %s HTTP/1.1\r\nHost: q.example\r\nContent-Length: %d\r\n%s\r\n%s",
		path, len(body), strings.Join(append(headers, ""), "\r\n"), body)
}

func TestWhichRequestsAreServedHere(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false})
	tests := []struct {
		name   string
		raw    string
		via    string
		status int
	}{
		{"plain POST", post("/push", `{"id":"a"}`, "Authorization: Bearer t"), "fast", 200},
		{"lower-case names", "POST /push HTTP/1.1\r\nhost: q.example\r\ncontent-length: 2\r\nauthorization: Bearer t\r\n\r\n{}", "fast", 200},
		{"bare LF line ends", "POST /push HTTP/1.1\nHost: q.example\nContent-Length: 2\n\n{}", "fast", 200},
		{"no body", "POST /push HTTP/1.1\r\nHost: q.example\r\n\r\n", "fast", 200},
		{"Connection keep-alive", post("/push", "{}", "Connection: keep-alive"), "fast", 200},
		{"other path", post("/stats", "{}"), "net/http", 200},
		{"GET", "GET /push HTTP/1.1\r\nHost: q.example\r\n\r\n", "net/http", 200},
		{"query string", post("/push?x=1", "{}"), "net/http", 200},
		{"HTTP/1.0", "POST /push HTTP/1.0\r\nHost: q.example\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n{}", "net/http", 200},
		{"chunked", "POST /push HTTP/1.1\r\nHost: q.example\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", "net/http", 200},
		{"body above MaxBody", post("/push", strings.Repeat("x", 1025)), "net/http", 200},
		{"two Content-Lengths", "POST /push HTTP/1.1\r\nHost: q.example\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}", "net/http", 200},
		{"folded header", post("/push", "{}", "X-A: 1", " 2"), "net/http", 200},
		{"Connection upgrade", post("/push", "{}", "Connection: upgrade", "Upgrade: websocket"), "net/http", 200},
		{"head larger than the buffer", post("/push", "{}", "X-Big: "+strings.Repeat("b", 5000)), "net/http", 200},
		{"missing Host", "POST /push HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}", "", 400},
		{"bad header name", post("/push", "{}", "X A: 1"), "", 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, br := dial(t, ts.addr)
			resp, s := roundTrip(t, c, br, tt.raw)
			if resp.StatusCode != tt.status || s.Via != tt.via {
				t.Fatalf("status %d via %q, want %d via %q", resp.StatusCode, s.Via, tt.status, tt.via)
			}
			if tt.via == "fast" && (s.Method != "POST" || s.Path != "/push" || s.Host != "q.example") {
				t.Errorf("handler saw %+v", s)
			}
		})
	}
}

func TestAnswersKeepTheHandlersHeadersAndBody(t *testing.T) {
	fast := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/teapot":
			w.Header().Set("Content-Length", "999") // wrong: the connection's own is sent
			w.Header().Set("X-Kind", "tea")
			w.WriteHeader(http.StatusTeapot)
			_, _ = io.WriteString(w, "short and stout")
		case "/empty":
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
			_, _ = io.WriteString(w, "dropped")
		}
	})
	ts := startServer(t, fast, echo("net/http"), map[string]bool{"/teapot": false, "/empty": false, "/nocontent": false})
	c, br := dial(t, ts.addr)
	tests := []struct {
		path, body string
		status     int
		header     map[string]string
	}{
		{"/teapot", "short and stout", 418, map[string]string{"X-Kind": "tea", "Content-Length": "15",
			"Content-Type": "text/plain; charset=utf-8"}},
		{"/empty", "", 200, map[string]string{"Content-Length": "0"}},
		{"/nocontent", "", 204, map[string]string{"Content-Length": ""}},
	}
	for _, tt := range tests {
		if _, err := io.WriteString(c, post(tt.path, "")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != tt.status || string(body) != tt.body {
			t.Errorf("%s: %d %q, want %d %q", tt.path, resp.StatusCode, body, tt.status, tt.body)
		}
		for k, v := range tt.header {
			if got := resp.Header.Get(k); got != v {
				t.Errorf("%s: %s = %q, want %q", tt.path, k, got, v)
			}
		}
		if resp.Header.Get("Date") == "" {
			t.Errorf("%s: no Date header", tt.path)
		}
	}
}

func TestKeepAliveThenHandOff(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false})
	c, br := dial(t, ts.addr)
	for i := range 3 {
		if _, s := roundTrip(t, c, br, post("/push", fmt.Sprintf(`{"n":%d}`, i))); s.Via != "fast" || s.Body != fmt.Sprintf(`{"n":%d}`, i) {
			t.Fatalf("request %d: %+v", i, s)
		}
	}
	// A request net/http must read hands the connection over for good.
	if _, s := roundTrip(t, c, br, "GET /other HTTP/1.1\r\nHost: q.example\r\n\r\n"); s.Via != "net/http" {
		t.Fatalf("GET went %q", s.Via)
	}
	if _, s := roundTrip(t, c, br, post("/push", `{"after":1}`)); s.Via != "net/http" || s.Body != `{"after":1}` {
		t.Fatalf("after the hand-off: %+v", s)
	}
}

func TestPipelinedRequestsAnsweredInOrder(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false})
	c, br := dial(t, ts.addr)
	// The third is handed off with the fourth behind it, still unread.
	raw := post("/push", "1") + post("/push", "2") + post("/stats", "3") + post("/push", "4")
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	want := []seen{{Via: "fast", Body: "1"}, {Via: "fast", Body: "2"}, {Via: "net/http", Body: "3"}, {Via: "net/http", Body: "4"}}
	for i, w := range want {
		_, s := readAnswer(t, br)
		if s.Via != w.Via || s.Body != w.Body {
			t.Fatalf("answer %d: %+v, want via %s body %s", i, s, w.Via, w.Body)
		}
	}
}

func TestHeadArrivingInPieces(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false})
	c, br := dial(t, ts.addr)
	raw := post("/push", `{"slow":true}`)
	for i := 0; i < len(raw); i += 7 {
		if _, err := io.WriteString(c, raw[i:min(i+7, len(raw))]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, s := readAnswer(t, br); s.Via != "fast" || s.Body != `{"slow":true}` {
		t.Fatalf("%+v", s)
	}
}

// As in net/http without a ReadTimeout, the header timeout bounds the head
// only: a body may take longer.
func TestBodyIsNotBoundByTheHeaderTimeout(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false},
		func(s *Server) { s.ReadHeaderTimeout = 50 * time.Millisecond })
	c, br := dial(t, ts.addr)
	if _, err := io.WriteString(c, "POST /push HTTP/1.1\r\nHost: q.example\r\nContent-Length: 7\r\n\r\n{\"a\""); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // four header timeouts
	if _, err := io.WriteString(c, ":1}"); err != nil {
		t.Fatal(err)
	}
	if _, s := readAnswer(t, br); s.Via != "fast" || s.Body != `{"a":1}` {
		t.Fatalf("%+v", s)
	}
}

// RFC 9112 (2.2): a server should ignore at least one empty line before a
// request line. A client that ends a body with CRLF sends one, with the
// body or on its own; net/http ignores it after a POST, and so must the
// fast path.
func TestEmptyLinesBeforeARequestAreIgnored(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/get": false})
	const body = `{"id":"job1"}` // 13 bytes
	// step is one write and the number of answers it brings.
	type step struct {
		send    string
		answers int
	}
	for _, via := range []struct{ name, path string }{{"fast", "/get"}, {"net/http", "/stats"}} {
		req := post(via.path, body)
		for _, tt := range []struct {
			name  string
			steps []step
		}{
			{"CRLF", []step{{req + "\r\n" + req, 2}}},
			{"LF", []step{{req + "\n" + req, 2}}},
			{"two CRLF", []step{{req + "\r\n\r\n" + req, 2}}},
			{"CRLF with the body, next request later", []step{{req + "\r\n", 1}, {req, 1}}},
			{"CRLF on its own", []step{{req, 1}, {"\r\n", 0}, {req, 1}}},
		} {
			t.Run(via.name+"/"+tt.name, func(t *testing.T) {
				c, br := dial(t, ts.addr)
				answered := 0
				for _, st := range tt.steps {
					if _, err := io.WriteString(c, st.send); err != nil {
						t.Fatal(err)
					}
					for range st.answers {
						answered++
						resp, s := readAnswer(t, br)
						if resp.StatusCode != http.StatusOK || s.Via != via.name || s.Body != body {
							t.Fatalf("answer %d: status %d via %q body %q, want 200 via %s body %s",
								answered, resp.StatusCode, s.Via, s.Body, via.name, body)
						}
					}
				}
			})
		}
	}
}

// waitUntil polls cond until it holds, failing the test after 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond) // polling interval, not synchronisation
	}
}

// A head that claims a body of MaxBody bytes costs the bytes that arrive,
// not the claim.
func TestClaimedBodyCostsWhatArrives(t *testing.T) {
	const claimed = 16 << 20
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false},
		func(s *Server) { s.MaxBody = claimed })
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, _ := dial(t, ts.addr)
	if _, err := fmt.Fprintf(c, "POST /push HTTP/1.1\r\nHost: q.example\r\nContent-Length: %d\r\n\r\n{", claimed); err != nil {
		t.Fatal(err)
	}
	c.Close()
	waitUntil(t, "the server is done with the connection", func() bool {
		ts.srv.mu.Lock()
		defer ts.srv.mu.Unlock()
		return len(ts.srv.conns) == 0
	})
	runtime.ReadMemStats(&after)
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > claimed/16 {
		t.Fatalf("serving a claim of %d bytes with 1 sent allocated %d bytes", claimed, allocated)
	}
}

// A body whose client stops sending before its end reaches the handler as
// in net/http: the bytes that came, then io.ErrUnexpectedEOF. Its answer is
// still sent, to a client that only closed its side, and the connection
// then closed.
func TestBodyCutShortReachesTheHandler(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		fmt.Fprintf(w, "read %q, then %v", body, err)
	})
	ts := startServer(t, handler, echo("net/http"), map[string]bool{"/push": false})
	c, br := dial(t, ts.addr)
	if _, err := io.WriteString(c, "POST /push HTTP/1.1\r\nHost: q.example\r\nContent-Length: 100\r\n\r\n{\"id\""); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a body cut short: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	if want := `read "{\"id\"", then unexpected EOF`; string(raw) != want || !resp.Close {
		t.Fatalf("answer %q (close %v), want %q, Connection: close", raw, resp.Close, want)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after a body cut short the connection should close, read gave %v", err)
	}
}

// A body that arrives in pieces, beyond the read buffer, is read whole,
// and the connection's buffer serves the next one.
func TestBodyArrivingInPieces(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false},
		func(s *Server) { s.MaxBody = 64 << 10 })
	c, br := dial(t, ts.addr)
	for _, size := range []int{3 * readBufferSize, 10 << 10, 60 << 10} {
		body := strings.Repeat("b", size)
		raw := post("/push", body)
		for i := 0; i < len(raw); i += 1500 {
			if _, err := io.WriteString(c, raw[i:min(i+1500, len(raw))]); err != nil {
				t.Fatal(err)
			}
		}
		if _, s := readAnswer(t, br); s.Via != "fast" || s.Body != body {
			t.Fatalf("body of %d bytes: via %q, %d bytes back", size, s.Via, len(s.Body))
		}
	}
}

// ReadBodyTimeout bounds a body from the end of its head: the handler of a
// slower one reads the bytes that came, then a deadline error, as in
// net/http; its answer is sent and the connection closed. Once the body is
// in, a held request outlives it.
func TestBodyReadTimeout(t *testing.T) {
	const timeout = 100 * time.Millisecond
	release := make(chan struct{})
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusRequestTimeout)
			fmt.Fprintf(w, "read %q, then: deadline %v", body, errors.Is(err, os.ErrDeadlineExceeded))
			return
		}
		if r.URL.Path == "/pop" {
			select {
			case <-release:
			case <-r.Context().Done():
				body = []byte("cancelled")
			}
		}
		_ = json.NewEncoder(w).Encode(seen{Via: "fast", Path: r.URL.Path, Body: string(body)})
	})
	ts := startServer(t, handler, echo("net/http"), map[string]bool{"/push": false, "/pop": true},
		func(s *Server) { s.ReadBodyTimeout = timeout })

	t.Run("slow body", func(t *testing.T) {
		c, br := dial(t, ts.addr)
		if _, err := io.WriteString(c, "POST /push HTTP/1.1\r\nHost: q.example\r\nContent-Length: 100\r\n\r\n{"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer to a body slower than ReadBodyTimeout: %v", err)
		}
		raw, _ := io.ReadAll(resp.Body)
		if want := `read "{", then: deadline true`; resp.StatusCode != http.StatusRequestTimeout || string(raw) != want || !resp.Close {
			t.Fatalf("answer %d %q (close %v), want 408 %q, Connection: close", resp.StatusCode, raw, resp.Close, want)
		}
		if _, err := br.ReadByte(); err != io.EOF {
			t.Fatalf("after a body slower than ReadBodyTimeout the connection should close, read gave %v", err)
		}
	})
	t.Run("held request outlives it", func(t *testing.T) {
		c, br := dial(t, ts.addr)
		raw := post("/pop", "held")
		if _, err := io.WriteString(c, raw[:len(raw)-2]); err != nil {
			t.Fatal(err)
		}
		time.Sleep(timeout / 4) // the rest of the body comes later: the deadline is set
		if _, err := io.WriteString(c, raw[len(raw)-2:]); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(3*timeout, func() { close(release) })
		if _, s := readAnswer(t, br); s.Body != "held" {
			t.Fatalf("held request answered %+v, want it held until released", s)
		}
	})
}

func TestConnectionCloseIsHonoured(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false})
	c, br := dial(t, ts.addr)
	resp, s := roundTrip(t, c, br, post("/push", "{}", "Connection: close"))
	if s.Via != "fast" || !resp.Close {
		t.Fatalf("via %q, close %v", s.Via, resp.Close)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("after Connection: close the server should close, read gave %v", err)
	}
}

func TestRealClient(t *testing.T) {
	ts := startServer(t, echo("fast"), echo("net/http"), map[string]bool{"/push": false})
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 5 {
		req, _ := http.NewRequest(http.MethodPost, "http://"+ts.addr+"/push", strings.NewReader(fmt.Sprint(i)))
		req.Header.Set("Authorization", "Bearer secret")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var s seen
		err = json.NewDecoder(resp.Body).Decode(&s)
		resp.Body.Close()
		if err != nil || s.Via != "fast" || s.Body != fmt.Sprint(i) || s.Token != "Bearer secret" || s.Host != ts.addr {
			t.Fatalf("request %d: %+v %v", i, s, err)
		}
	}
}

// holder waits until its request's context ends and reports why.
type holder struct {
	started chan struct{}
	ended   chan error
}

func (h *holder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	_, _ = io.ReadAll(r.Body)
	h.started <- struct{}{}
	select {
	case <-r.Context().Done():
		h.ended <- r.Context().Err()
	case <-time.After(20 * time.Second):
		h.ended <- errors.New("not cancelled")
	}
}

// cancelledWhenClientLeaves closes c once h's request runs, and checks
// that the request's context is then cancelled.
func (h *holder) cancelledWhenClientLeaves(t *testing.T, c net.Conn) {
	t.Helper()
	<-h.started
	h.cancelledOnClose(t, c)
}

// cancelledOnClose closes c, h's request running, and checks that the
// request's context is then cancelled.
func (h *holder) cancelledOnClose(t *testing.T, c net.Conn) {
	t.Helper()
	c.Close()
	select {
	case err := <-h.ended:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("held request ended with %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held request was not cancelled after its client left")
	}
}

func TestClientLeavingCancelsAHeldRequest(t *testing.T) {
	h := &holder{started: make(chan struct{}, 1), ended: make(chan error, 1)}
	ts := startServer(t, h, echo("net/http"), map[string]bool{"/pop": true})
	c, _ := dial(t, ts.addr)
	if _, err := io.WriteString(c, post("/pop", `{"topic":"t"}`)); err != nil {
		t.Fatal(err)
	}
	h.cancelledWhenClientLeaves(t, c)
}

// The watch is reused from one held request to the next on a connection:
// after held requests that answered at once (their watch never started),
// a held request whose client leaves is still cancelled.
func TestClientLeavingCancelsALaterHeldRequest(t *testing.T) {
	h := &holder{started: make(chan struct{}, 1), ended: make(chan error, 1)}
	fast := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			h.ServeHTTP(w, r)
			return
		}
		_, _ = io.WriteString(w, `{"via":"fast"}`)
	})
	ts := startServer(t, fast, echo("net/http"), map[string]bool{"/pop": true})
	c, br := dial(t, ts.addr)
	for i := 0; i < 3; i++ {
		if _, s := roundTrip(t, c, br, post("/pop", "{}")); s.Via != "fast" {
			t.Fatalf("quick request %d via %q", i, s.Via)
		}
	}
	if _, err := io.WriteString(c, post("/pop", "{}", "X-Hold: 1")); err != nil {
		t.Fatal(err)
	}
	h.cancelledWhenClientLeaves(t, c)
}

// A held request is cancelled when its client leaves, whatever it sent
// behind it: the CRLF some clients end a body with, a stray byte, or a
// whole pipelined request, with the request or once it runs. On net/http
// the bytes sent with the request are covered; bytes sent later are not
// (its background read stops at the first byte), so only the fast path is
// held to those.
func TestClientLeavingCancelsAHeldRequestWithBytesBehindIt(t *testing.T) {
	behind := map[string]string{
		"CRLF":              "\r\n",
		"one byte":          "x",
		"pipelined request": post("/get", "{}"),
	}
	for _, via := range []struct{ name, path string }{{"fast", "/pop"}, {"net/http", "/pop?via=net/http"}} {
		for _, later := range []bool{false, true} {
			if later && via.name == "net/http" {
				continue
			}
			for name, extra := range behind {
				when := "with the request"
				if later {
					when = "while it runs"
				}
				t.Run(via.name+"/"+name+" "+when, func(t *testing.T) {
					h := &holder{started: make(chan struct{}, 1), ended: make(chan error, 1)}
					ts := startServer(t, h, h, map[string]bool{"/pop": true, "/get": false})
					c, _ := dial(t, ts.addr)
					raw := post(via.path, `{"topic":"t"}`)
					if !later {
						raw += extra
					}
					if _, err := io.WriteString(c, raw); err != nil {
						t.Fatal(err)
					}
					<-h.started
					if later {
						if _, err := io.WriteString(c, extra); err != nil {
							t.Fatal(err)
						}
					}
					h.cancelledOnClose(t, c)
				})
			}
		}
	}
}

// A request pipelined behind a held one is answered after it, in order,
// and does not end the hold while its client stays.
func TestRequestPipelinedBehindAHeldOneIsServedAfterIt(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/pop" {
			held <- struct{}{}
			select {
			case <-release:
			case <-r.Context().Done():
				body = []byte("cancelled")
			}
		}
		_ = json.NewEncoder(w).Encode(seen{Path: r.URL.Path, Body: string(body)})
	})
	ts := startServer(t, handler, handler, map[string]bool{"/pop": true, "/get": false})
	for _, via := range []struct{ name, query string }{{"fast", ""}, {"net/http", "?via=net/http"}} {
		t.Run(via.name, func(t *testing.T) {
			c, br := dial(t, ts.addr)
			// The second pipelined request comes once the first runs, so
			// that the fast path's watch has to read it.
			if _, err := io.WriteString(c, post("/pop"+via.query, "held")+post("/get"+via.query, "1")); err != nil {
				t.Fatal(err)
			}
			select {
			case <-held:
			case <-time.After(5 * time.Second):
				t.Fatal("the held request never reached the handler")
			}
			if _, err := io.WriteString(c, post("/get"+via.query, "2")); err != nil {
				t.Fatal(err)
			}
			time.AfterFunc(20*time.Millisecond, func() { release <- struct{}{} })
			for i, want := range []seen{{Path: "/pop", Body: "held"}, {Path: "/get", Body: "1"}, {Path: "/get", Body: "2"}} {
				if _, got := readAnswer(t, br); got != want {
					t.Fatalf("answer %d: %+v, want %+v", i+1, got, want)
				}
			}
		})
	}
}

// The fast path reads ahead of a held request only as far as its read
// buffer: a client that pipelines more than that behind a held request has
// the hold ended early (the server can no longer tell whether it left);
// every request is still answered, in order.
func TestReadAheadBehindAHeldRequestIsBounded(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/pop" {
			select {
			case <-r.Context().Done():
				body = []byte("cancelled")
			case <-time.After(20 * time.Second):
			}
		}
		_ = json.NewEncoder(w).Encode(seen{Path: r.URL.Path, Body: string(body)})
	})
	ts := startServer(t, handler, handler, map[string]bool{"/pop": true, "/get": false})
	c, br := dial(t, ts.addr)
	pipelined := ""
	n := 0
	for ; len(pipelined) <= 2*readBufferSize; n++ {
		pipelined += post("/get", fmt.Sprint(n))
	}
	if _, err := io.WriteString(c, post("/pop", "held")+pipelined); err != nil {
		t.Fatal(err)
	}
	if _, got := readAnswer(t, br); got != (seen{Path: "/pop", Body: "cancelled"}) {
		t.Fatalf("held request: %+v, want it cancelled", got)
	}
	for i := range n {
		if _, got := readAnswer(t, br); got != (seen{Path: "/get", Body: fmt.Sprint(i)}) {
			t.Fatalf("pipelined request %d: %+v", i, got)
		}
	}
}

func TestHeldRequestAnswersWhileClientStays(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var cancelled bool
	fast := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
			mu.Lock()
			cancelled = true
			mu.Unlock()
		}
		_, _ = io.WriteString(w, `{"via":"fast"}`)
	})
	ts := startServer(t, fast, echo("net/http"), map[string]bool{"/pop": true})
	c, br := dial(t, ts.addr)
	if _, err := io.WriteString(c, post("/pop", "{}")); err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, func() { close(release) })
	resp, s := readAnswer(t, br)
	mu.Lock()
	defer mu.Unlock()
	if resp.StatusCode != 200 || s.Via != "fast" || cancelled {
		t.Fatalf("status %d via %q cancelled %v", resp.StatusCode, s.Via, cancelled)
	}
	// The connection is still good for the next requests: this one
	// answers before its watch starts, and the one after it must still be
	// read (no deadline left behind by either).
	for _, which := range []string{"second", "third"} {
		if _, err := io.WriteString(c, post("/pop", "{}")); err != nil {
			t.Fatal(err)
		}
		if _, s := readAnswer(t, br); s.Via != "fast" {
			t.Fatalf("%s request via %q", which, s.Via)
		}
	}
}

func TestShutdownWaitsForActiveRequestsAndClosesIdle(t *testing.T) {
	h := &holder{started: make(chan struct{}, 1), ended: make(chan error, 1)}
	release := make(chan struct{})
	fast := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			h.started <- struct{}{}
			<-release
		}
		_, _ = io.WriteString(w, `{"Via":"fast"}`)
	})
	ts := startServer(t, fast, echo("net/http"), map[string]bool{"/slow": false, "/push": false})
	idle, idleReader := dial(t, ts.addr)
	roundTrip(t, idle, idleReader, post("/push", "{}"))
	handedOff, handedReader := dial(t, ts.addr)
	roundTrip(t, handedOff, handedReader, "GET / HTTP/1.1\r\nHost: q.example\r\n\r\n")
	busy, busyReader := dial(t, ts.addr)
	if _, err := io.WriteString(busy, post("/slow", "{}")); err != nil {
		t.Fatal(err)
	}
	<-h.started

	shutdown := make(chan error, 1)
	go func() { shutdown <- ts.srv.Shutdown(context.Background()) }()
	for _, r := range []*bufio.Reader{idleReader, handedReader} {
		if _, err := r.ReadByte(); err != io.EOF {
			t.Fatalf("an idle connection should be closed by Shutdown, read gave %v", err)
		}
	}
	select {
	case err := <-shutdown:
		t.Fatalf("Shutdown returned %v with a request in progress", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(release)
	resp, s := readAnswer(t, busyReader)
	if s.Via != "fast" || !resp.Close {
		t.Fatalf("the request in progress: via %q, Connection: close %v", s.Via, resp.Close)
	}
	if err := <-shutdown; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if err := <-ts.served; !errors.Is(err, http.ErrServerClosed) {
		t.Fatalf("Serve returned %v", err)
	}
	ts.served <- http.ErrServerClosed // for the cleanup
	if _, err := net.Dial("tcp", ts.addr); err == nil {
		t.Fatal("still accepting after Shutdown")
	}
}

func TestEndOfHead(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"POST / HTTP/1.1\r\nHost: a\r\n\r\nbody", 28},
		{"POST / HTTP/1.1\nHost: a\n\nbody", 25},
		{"POST / HTTP/1.1\r\nHost: a\r\n", 0},
		{"POST / HTTP/1.1\r\nHost: a\r\n\r", 0},
		{"", 0},
	}
	for _, tt := range tests {
		if got := endOfHead([]byte(tt.in)); got != tt.want {
			t.Errorf("endOfHead(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

// An answer written here reads as net/http writes it, for what handlers
// do: the status line, the headers (a sniffed Content-Type, but not under
// a Content-Encoding; the handler's Date), the body, or none for a status
// that has none, and whether the connection stays. The same handler runs
// behind both servers, and each case goes to each.
func TestAnswersAsNetHTTPWritesThem(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/sniffed":
			_, _ = io.WriteString(w, "<!doctype html><p>hi")
		case "/encoded":
			h.Set("Content-Encoding", "gzip")
			_, _ = w.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0})
		case "/typed":
			h.Set("Content-Type", "application/json")
			h.Add("X-Many", "b")
			h.Add("X-Many", "a")
			w.WriteHeader(http.StatusAccepted)
			_, _ = io.WriteString(w, `{"ok":true}`)
		case "/nothing":
		case "/nocontent":
			w.WriteHeader(http.StatusNoContent)
			_, _ = io.WriteString(w, "dropped")
		case "/notmodified":
			w.WriteHeader(http.StatusNotModified)
			_, _ = io.WriteString(w, "dropped")
		case "/odd-status":
			w.WriteHeader(599)
			_, _ = io.WriteString(w, "odd")
		case "/dated":
			h.Set("Date", "Mon, 02 Jan 2006 15:04:05 GMT")
			_, _ = io.WriteString(w, "dated")
		case "/closing":
			h.Set("Connection", "close")
			_, _ = io.WriteString(w, "bye")
		case "/twice":
			w.WriteHeader(http.StatusCreated)
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "first wins")
		}
	})
	paths := map[string]bool{}
	for _, p := range []string{"/sniffed", "/encoded", "/typed", "/nothing", "/nocontent", "/notmodified",
		"/odd-status", "/dated", "/closing", "/twice"} {
		paths[p] = false
	}
	quiet := func(s *Server) { s.Fallback.ErrorLog = log.New(io.Discard, "", 0) } // "superfluous WriteHeader"
	fast := startServer(t, handler, echo("net/http"), paths)
	plain := startServer(t, echo("fast"), handler, map[string]bool{}, quiet)
	type answer struct {
		status int
		proto  string
		header http.Header
		body   string
		close  bool
	}
	send := func(addr, path string) answer {
		c, br := dial(t, addr)
		if _, err := io.WriteString(c, post(path, "")); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		body, _ := io.ReadAll(resp.Body)
		h := resp.Header.Clone()
		if path != "/dated" {
			h.Del("Date") // the clock's
		}
		return answer{status: resp.StatusCode, proto: resp.Proto, header: h, body: string(body), close: resp.Close}
	}
	for path := range paths {
		got, want := send(fast.addr, path), send(plain.addr, path)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\nhere     %+v\nnet/http %+v", path, got, want)
		}
	}
}

// The handler gets the request net/http would build from a head taken
// here: the same fields, header and body. (Not the context's values:
// net/http's carries its server and local address.)
func TestHandlerSeesTheRequestNetHTTPWouldBuild(t *testing.T) {
	saw := make(chan string, 1)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		saw <- fmt.Sprintf("%s %s %q proto %s %d.%d host %q length %d close %v uri %q te %v trailer %v tls %v remote %s\nheader %v\nbody %q %v",
			r.Method, r.URL, r.URL.Path, r.Proto, r.ProtoMajor, r.ProtoMinor, r.Host, r.ContentLength, r.Close,
			r.RequestURI, r.TransferEncoding, r.Trailer, r.TLS != nil, host, r.Header, body, err)
		_, _ = io.WriteString(w, "{}")
	})
	fast := startServer(t, handler, echo("net/http"), map[string]bool{"/push": false})
	plain := startServer(t, echo("fast"), handler, map[string]bool{})
	for _, raw := range []string{
		post("/push", `{"id":"1"}`),
		post("/push", "", "Connection: close"),
		"POST /push HTTP/1.1\r\nhost: Q.Example:80\r\ncontent-length: 2\r\nx-dup: a\r\nX-Dup:  b \r\nUser-Agent:\r\n" +
			"Authorization: Bearer t\r\nConnection: keep-alive\r\n\r\n{}",
		"POST /push HTTP/1.1\nHost: [::1]:9277\nContent-Length: 0\nAccept-Encoding: gzip\n\n",
	} {
		var got, want string
		for _, side := range []struct {
			addr string
			into *string
		}{{fast.addr, &got}, {plain.addr, &want}} {
			c, br := dial(t, side.addr)
			resp, _ := roundTrip(t, c, br, raw)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("%q: status %d", raw, resp.StatusCode)
			}
			*side.into = <-saw
		}
		if got != want {
			t.Errorf("%q:\nhere     %s\nnet/http %s", raw, got, want)
		}
	}
}
