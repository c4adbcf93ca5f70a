package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Held pops whose clients sent more than the request before leaving (the
// CRLF some clients end a body with, a stray byte, a pipelined request) are
// let go as soon as the others, on both sides of the port: they keep no
// max_held_pops slot, and a job pushed afterwards goes to the live consumer
// on its first attempt, not to a departed one.
func TestRunHeldPopsOfDepartedClientsWithBytesBehind(t *testing.T) {
	const ghosts = 3
	pop := `{"topic":"ghost","timeout":30}`
	requests := map[string]func(addr string) string{
		// The fast path takes a plain request; a chunked one goes to
		// net/http.
		"fast": func(addr string) string {
			return fmt.Sprintf("POST /pop HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s", addr, len(pop), pop)
		},
		"net/http": func(addr string) string {
			return fmt.Sprintf("POST /pop HTTP/1.1\r\nHost: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", addr, len(pop), pop)
		},
	}
	behind := map[string]func(addr string) string{
		"CRLF":     func(string) string { return "\r\n" },
		"one byte": func(string) string { return "x" },
		"pipelined request": func(addr string) string {
			return fmt.Sprintf("POST /get HTTP/1.1\r\nHost: %s\r\nContent-Length: 12\r\n\r\n{\"id\":\"any\"}", addr)
		},
	}
	for via, request := range requests {
		for name, extra := range behind {
			t.Run(via+"/"+name, func(t *testing.T) {
				addr, _ := startRun(t, "-embedded", "-c", writeConf(t, "bind_address = 127.0.0.1:0",
					fmt.Sprintf("max_held_pops = %d", ghosts)))
				for range ghosts {
					c := dialRaw(t, addr)
					if _, err := io.WriteString(c, request(addr)+extra(addr)); err != nil {
						t.Fatal(err)
					}
					c.Close()
				}
				// Each ghost's pop is answered (nobody reads it) once the
				// server sees its client gone, well before its timeout.
				if err := waitForAnswered(addr, "/pop", ghosts, 10*time.Second); err != nil {
					t.Fatalf("the pops of departed clients were not let go: %v", err)
				}
				if err := waitForMetric(addr, "delayqueue_held_pops 0", 10*time.Second); err != nil {
					t.Fatal(err)
				}

				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				held := make(chan heldAnswer, 1)
				go func() {
					env, err := postContext(ctx, addr, "/pop", `{"topic":"ghost","timeout":10}`)
					held <- heldAnswer{env, err}
				}()
				if err := waitForMetric(addr, "delayqueue_held_pops 1", 10*time.Second); err != nil {
					t.Fatalf("the live consumer's pop is not held: %v", err)
				}
				if env := post(t, addr, "/push", `{"topic":"ghost","id":"real","ttr":60}`); env.Code != 0 {
					t.Fatalf("push: %+v", env)
				}
				select {
				case answer := <-held:
					data := string(answer.env.Data)
					if answer.err != nil || answer.env.Code != 0 || !strings.Contains(data, `"id":"real"`) || !strings.Contains(data, `"attempts":1`) {
						t.Fatalf("live consumer's pop: %+v %v, want job real on its first attempt", answer.env, answer.err)
					}
				case <-time.After(10 * time.Second):
					t.Fatal("the live consumer did not get the job")
				}
			})
		}
	}
}

// waitForAnswered polls /metrics until the requests answered on endpoint,
// whatever their result, number n.
func waitForAnswered(addr, endpoint string, n int, within time.Duration) error {
	prefix := fmt.Sprintf(`delayqueue_http_requests_total{endpoint=%q,`, endpoint)
	deadline := time.Now().Add(within)
	for {
		text, err := getText(addr, "/metrics", "")
		answered := 0
		for _, line := range strings.Split(text, "\n") {
			if !strings.HasPrefix(line, prefix) {
				continue
			}
			count, convErr := strconv.Atoi(line[strings.LastIndexByte(line, ' ')+1:])
			if convErr != nil {
				return fmt.Errorf("metric line %q: %w", line, convErr)
			}
			answered += count
		}
		if err == nil && answered == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d requests answered on %s within %s, want %d (last error %v)", answered, endpoint, within, n, err)
		}
		time.Sleep(10 * time.Millisecond) // polling interval, not synchronisation
	}
}
