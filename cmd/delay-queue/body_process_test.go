package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// procRSS reads the resident set size of the server's current incarnation
// from /proc/<pid>/status (VmRSS), in bytes.
func procRSS(t *testing.T, s *procServer) int64 {
	t.Helper()
	s.mu.Lock()
	pid := s.cmd.Process.Pid
	s.mu.Unlock()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Skipf("no /proc on this system: %v", err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		value, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		kib, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(value), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("VmRSS of pid %d: %q: %v", pid, line, err)
		}
		return kib << 10
	}
	t.Fatalf("/proc/%d/status has no VmRSS line", pid)
	return 0
}

// A request head of a few dozen bytes that claims a body of max_body_bytes
// costs the server the bytes that arrived, not the claim. A first wave of
// claims is opened and dropped (so that the memory the server took for it
// is reused and touched by the next); then 200 claims, still open, leave
// the server's memory within tens of MB of where it started.
func TestProcessClaimedBodiesCostWhatArrives(t *testing.T) {
	const (
		conns   = 200
		claimed = 16 << 20 // max_body_bytes' default
		// 200 connections cost about 11 MiB in a plain build and 50 MiB in
		// the race build these tests run (the race detector's state per
		// goroutine); the claims add up to 3 GiB, and a server that sized
		// its buffers by them grew past 300 MiB here.
		maxGrowth = 100 << 20
	)
	srv := redistest.Start(t)
	s := startProcServer(t, "claims", srv.Addr)
	api := newProcClient()
	defer api.close()
	// Both sides of the port have served before the baseline is taken.
	api.mustPush(t, s, procPush{Topic: "claims", ID: "warm", TTR: 30, Body: strings.Repeat("w", 100<<10)})
	api.mustGet(t, s, "warm")
	before := procRSS(t, s)

	dropped := procOpenClaims(t, s, conns, claimed)
	for _, c := range dropped {
		c.Close()
	}
	// Each dropped claim is answered (code 1, the body ended early) once
	// the server has let it go.
	if err := waitForMetric(s.addr, fmt.Sprintf(`delayqueue_http_requests_total{endpoint="/push",result="error"} %d`, conns), 20*time.Second); err != nil {
		t.Fatal(err)
	}
	procOpenClaims(t, s, conns, claimed)
	after := procRSS(t, s)
	t.Logf("RSS %d MiB before, %d MiB with %d claims of %d MiB open", before>>20, after>>20, conns, claimed>>20)
	if after-before > maxGrowth {
		t.Fatalf("RSS grew by %d MiB with %d claimed bodies open, want at most %d MiB",
			(after-before)>>20, conns, maxGrowth>>20)
	}
}

// procOpenClaims opens n connections to s, each sending a request head that
// claims a body of claimed bytes and one byte of it, and returns once the
// server is reading every body. The test's end closes them.
func procOpenClaims(t *testing.T, s *procServer, n, claimed int) []net.Conn {
	t.Helper()
	// Expect: 100-continue makes net/http answer "100 Continue" when the
	// handler first reads the body: by then the server has sized its
	// buffer, whatever it does. (That header, and a length above the fast
	// path's, hand these requests to net/http, as the length alone would.)
	head := fmt.Sprintf("POST /push HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n{", s.addr, claimed)
	conns := make([]net.Conn, 0, n)
	for i := range n {
		c, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := c.Write([]byte(head)); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("connection %d: no 100 Continue: %v", i, err)
		}
		if resp.StatusCode != http.StatusContinue {
			t.Fatalf("connection %d: status %d, want 100 while the body is awaited", i, resp.StatusCode)
		}
	}
	return conns
}

// read_body_timeout ends a request whose body does not come, on both sides
// of the port alike: it is answered 408 and its connection closed. (Before
// it, such a connection stayed open as long as its client liked.)
func TestProcessReadBodyTimeout(t *testing.T) {
	srv := redistest.Start(t)
	s := startProcServer(t, "slow-body", srv.Addr, "read_body_timeout = 1")
	for _, tt := range []struct {
		via    string
		length int // the fast path takes up to 64 KiB
	}{
		{"fast", 100},
		{"net/http", 16 << 20},
	} {
		t.Run(tt.via, func(t *testing.T) {
			c, err := net.Dial("tcp", s.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			if _, err := fmt.Fprintf(c, "POST /push HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n{", s.addr, tt.length); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(c)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer to a body slower than read_body_timeout: %v", err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusRequestTimeout || !strings.Contains(string(raw), "read_body_timeout") {
				t.Fatalf("answer %d %s, want 408 naming read_body_timeout", resp.StatusCode, raw)
			}
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("the connection should be closed after read_body_timeout, read gave %v", err)
			}
		})
	}
}
