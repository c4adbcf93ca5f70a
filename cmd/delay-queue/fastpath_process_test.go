package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/wire"
)

// The connection loops that run a request, as goroutine profiles name them.
const (
	fastPathLoop = "github.com/delay-queue/delay-queue/internal/http1.(*conn).serve("
	netHTTPLoop  = "net/http.(*conn).serve("
)

// Both http_fast_path settings serve the job endpoints, and with false no
// request runs in internal/http1. The answers are the same either way, by
// design; what tells the two apart from outside is the goroutine that runs
// a held /pop, in the profile debug_addr serves: internal/http1's
// connection loop, or net/http's.
//
// With max_body_bytes below the fast path's own limit, a larger body is
// answered 413 and its connection closed, as net/http does.
func TestProcessHTTPFastPathSetting(t *testing.T) {
	const maxBody = 1000
	srv := redistest.Start(t)
	for _, tt := range []struct {
		setting       string
		loop, notLoop string
	}{
		{"true", fastPathLoop, netHTTPLoop},
		{"false", netHTTPLoop, fastPathLoop},
	} {
		t.Run("http_fast_path="+tt.setting, func(t *testing.T) {
			debugAddr := "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
			s := startProcServer(t, "fast-path-"+tt.setting, srv.Addr,
				"http_fast_path = "+tt.setting, "debug_addr = "+debugAddr, fmt.Sprintf("max_body_bytes = %d", maxBody))
			api := newProcClient()
			defer api.close()

			topic := "fast-path-" + tt.setting
			api.mustPush(t, s, procPush{Topic: topic, ID: topic + "-1", TTR: 30, Body: "over " + tt.setting})
			job := api.mustPop(t, s, topic, 5)
			if job == nil || job.ID != topic+"-1" || job.Body != "over "+tt.setting || job.Attempts != 1 {
				t.Fatalf("pop: %+v", job)
			}
			if env := api.mustOK(t, s, "/finish", wire.IDRequest{ID: job.ID}); env.Message != "finished" {
				t.Fatalf("finish answered %+v", env)
			}
			if stored := api.mustGet(t, s, job.ID); stored != nil {
				t.Fatalf("get after finish: %+v", stored)
			}

			checkTooLargeClosesTheConnection(t, s, maxBody+1)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			held := make(chan error, 1)
			go func() {
				hold := 30
				_, _, err := api.callContext(ctx, s.baseURL, "/pop", wire.PopRequest{Topic: topic + "-empty", Timeout: int64(hold)})
				held <- err
			}()
			var stack string
			redistest.WaitFor(t, 10*time.Second, "a held /pop in the goroutine profile", func() bool {
				stack = heldPopStack(t, debugAddr)
				return stack != ""
			})
			if !strings.Contains(stack, tt.loop) || strings.Contains(stack, tt.notLoop) {
				t.Fatalf("with http_fast_path = %s the held /pop should run in %s:\n%s", tt.setting, tt.loop, stack)
			}
			cancel()
			if err := <-held; err == nil {
				t.Fatal("the held pop answered although nothing was pushed")
			}
		})
	}
}

// checkTooLargeClosesTheConnection sends a /push of length bytes, over
// max_body_bytes, and checks that it is answered 413 and its connection
// closed.
func checkTooLargeClosesTheConnection(t *testing.T, s *procServer, length int) {
	t.Helper()
	c, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	body := strings.Repeat("x", length) // answered before it is parsed
	if _, err := fmt.Fprintf(c, "POST /push HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", s.addr, len(body), body); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a body over max_body_bytes: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(raw), "max_body_bytes") {
		t.Fatalf("answer %d %s, want 413 naming max_body_bytes", resp.StatusCode, raw)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the connection should be closed after a 413, read gave %v", err)
	}
}

// heldPopStack returns the stack of the goroutine running a /pop handler,
// from the goroutine profile served on debugAddr, or "" when there is none.
func heldPopStack(t *testing.T, debugAddr string) string {
	t.Helper()
	resp, err := http.Get("http://" + debugAddr + "/debug/pprof/goroutine?debug=2")
	if err != nil {
		t.Fatalf("goroutine profile: %v", err)
	}
	defer resp.Body.Close()
	profile, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("goroutine profile: status %d, %v", resp.StatusCode, err)
	}
	for _, goroutine := range strings.Split(string(profile), "\n\n") {
		if strings.Contains(goroutine, "/routers.(*handler).pop(") {
			return goroutine
		}
	}
	return ""
}
