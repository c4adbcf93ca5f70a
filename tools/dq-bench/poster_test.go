package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestReadResponse(t *testing.T) {
	tests := []struct {
		name       string
		raw        string
		wantStatus int
		wantBody   string
		wantKeep   bool
		wantErr    bool
	}{
		{"content-length", "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\nhello", 200, "hello", true, false},
		{"case-insensitive names", "HTTP/1.1 404 Not Found\r\ncontent-length: 2\r\n\r\nno", 404, "no", true, false},
		{"chunked with trailer", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n4;ext=1\r\ndefg\r\n0\r\nX-T: 1\r\n\r\n", 200, "abcdefg", true, false},
		{"connection close", "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false, false},
		{"HTTP/1.0 without keep-alive", "HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, "ok", false, false},
		{"no length: body to the close", "HTTP/1.1 200 OK\r\n\r\nuntil close", 200, "until close", false, false},
		{"1xx skipped", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 1\r\n\r\nx", 201, "x", true, false},
		{"short body", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort", 0, "", false, true},
		{"not HTTP", "SSH-2.0-OpenSSH\r\n\r\n", 0, "", false, true},
		{"bad length", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", 0, "", false, true},
		{"bad chunk size", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 0, "", false, true},
		{"header without colon", "HTTP/1.1 200 OK\r\nbogus\r\n\r\n", 0, "", false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body, keep, err := readResponse(bufio.NewReader(strings.NewReader(tt.raw)))
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if status != tt.wantStatus || string(body) != tt.wantBody || keep != tt.wantKeep {
				t.Errorf("got (%d, %q, keep %v), want (%d, %q, keep %v)", status, body, keep, tt.wantStatus, tt.wantBody, tt.wantKeep)
			}
		})
	}
}

// Both clients must send the same request and read the same answers from a
// real net/http server: small ones (Content-Length) and large ones
// (chunked), over reused connections.
func TestPostersAgainstNetHTTP(t *testing.T) {
	big := strings.Repeat("x", 64<<10)
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		payload, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "want a JSON POST", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/echo":
			w.Write(payload)
		case "/big":
			w.Write([]byte(big))
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)

	for _, kind := range []string{clientLean, clientStd} {
		t.Run(kind, func(t *testing.T) {
			conns.Store(0)
			p, err := newPoster(kind, srv.URL, 2)
			if err != nil {
				t.Fatal(err)
			}
			defer p.close()
			ctx := context.Background()
			for i := range 5 {
				status, body, err := p.post(ctx, "/echo", []byte(`{"n":1}`), false)
				if err != nil || status != 200 || string(body) != `{"n":1}` {
					t.Fatalf("echo %d: (%d, %q, %v)", i, status, body, err)
				}
				status, body, err = p.post(ctx, "/big", []byte(`{}`), false)
				if err != nil || status != 200 || string(body) != big {
					t.Fatalf("big %d: (%d, %d bytes, %v)", i, status, len(body), err)
				}
				status, _, err = p.post(ctx, "/missing", []byte(`{}`), false)
				if err != nil || status != 404 {
					t.Fatalf("missing %d: (%d, %v)", i, status, err)
				}
			}
			if n := conns.Load(); n != 1 {
				t.Errorf("15 sequential requests used %d connections, want 1 (keep-alive)", n)
			}
		})
	}
}

// A cancelled context ends a request the server holds, at once.
func TestLeanPosterCancel(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	p, err := newPoster(clientLean, srv.URL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	ctx, cancel := context.WithCancel(context.Background())
	var wrote atomic.Bool
	done := make(chan error, 1)
	go func() {
		_, _, err := p.post(withWroteHook(ctx, func() { wrote.Store(true) }), "/hold", []byte(`{}`), true)
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !wrote.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the request was never written")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	endsWith(t, done, context.Canceled, "post, its context cancelled")
}

// The floor server answers every request with a success envelope the
// client accepts, and stops when its context ends.
func TestServeFloor(t *testing.T) {
	port, err := findFreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- serveFloor(ctx, addr) }()
	client, err := newAPIClient(clientLean, "http://"+addr, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer client.close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err = client.push(context.Background(), pushJob{Topic: "t", ID: "1", TTR: 1})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("push to the floor server: %v", err)
	}
	cancel()
	endsWith(t, served, nil, "serveFloor, its context ended")
}

// endsWith waits (at most 10 s) for the error that done delivers, and
// checks that it is want (nil: no error).
func endsWith(t *testing.T, done <-chan error, want error, what string) {
	t.Helper()
	select {
	case err := <-done:
		if !errors.Is(err, want) {
			t.Fatalf("%s: error %v, want %v", what, err, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: did not return within 10 s", what)
	}
}
