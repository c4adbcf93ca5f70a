package routers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/defaults"
	"github.com/delay-queue/delay-queue/internal/redistest"
)

// TestForEachMemberMatchesTheDecoder checks the plain member scanner
// against encoding/json's decoder on valid objects with tricky spelling.
func TestForEachMemberMatchesTheDecoder(t *testing.T) {
	t.Parallel()
	for _, obj := range []string{
		`{}`,
		` { } `,
		`{"a":1}`,
		`{ "a" : 1 , "b" : "x" }`,
		"{\n\t\"a\"\r\n:\t-1.5e3\n}",
		`{"a":"}{][,\"","b":[1,{"c":"]"}],"c":{"d":{"e":[]}}}`,
		`{"k\"ey":true,"\u0074opic":null,"x\\":false}`,
		`{"a":"\\","b":"\\\"","c":"\u00e9\ud83d\ude00"}`,
		`{"a":1,"a":2,"A":3}`,
		`{"nested":[[[]],[{}],"[",{"]":"}"}],"n":0}`,
	} {
		type member struct{ Key, Value string }
		var want []member
		dec := json.NewDecoder(bytes.NewReader([]byte(obj)))
		dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%s: decoder: %v", obj, err)
			}
			want = append(want, member{k.(string), string(v)})
		}
		var got []member
		trimmed := bytes.TrimSpace([]byte(obj))
		if err := forEachMember(trimmed, func(k []byte, v json.RawMessage) { got = append(got, member{string(k), string(v)}) }); err != nil {
			t.Fatalf("%s: %v", obj, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n got %v\nwant %v", obj, got, want)
		}
	}
}

// TestForEachElementMatchesTheDecoder checks the plain element scanner
// against encoding/json on valid arrays with tricky spelling.
func TestForEachElementMatchesTheDecoder(t *testing.T) {
	t.Parallel()
	for _, arr := range []string{
		`[]`, `[ ]`, `[1]`, ` [ 1 , "a" , null ] `, "[\n\t-1.5e3\r\n,true]",
		`["],[\"",{"a":[1,"]"]},[[],[{}]],"\\"]`,
		`[{"topic":"t","id":"1","ttr":5},{"topic":"t","id":"2","ttr":1,"retry":[0]}]`,
	} {
		var want []json.RawMessage
		if err := json.Unmarshal([]byte(arr), &want); err != nil {
			t.Fatalf("%s: %v", arr, err)
		}
		var got []json.RawMessage
		forEachElement(bytes.TrimSpace([]byte(arr)), func(v json.RawMessage) { got = append(got, v) })
		if fmt.Sprintf("%s", got) != fmt.Sprintf("%s", want) {
			t.Errorf("%s:\n got %s\nwant %s", arr, got, want)
		}
	}
}

// stringValue takes the literal's bytes as they are when there is no
// escape, and decodes escapes like encoding/json otherwise.
func TestStringValueMatchesTheDecoder(t *testing.T) {
	for _, literal := range []string{
		`""`, `"plain"`, `"a/b <&> é 😀"`, `"\/"`, `"\"q\""`, `"a\\b"`, `"\n\t\r\b\f"`,
		`"\u0041\u00e9\ud83d\ude00"`, `"tail\\"`, `"\u0000"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(literal), &want); err != nil {
			t.Fatalf("%s: %v", literal, err)
		}
		got, err := stringValue("v", json.RawMessage(literal))
		if err != nil || got != want {
			t.Errorf("stringValue(%s) = %q, %v; want %q", literal, got, err, want)
		}
	}
}

// dialServer opens a connection to the server at url for hand-written
// requests, with a deadline that bounds the test.
func dialServer(t *testing.T, url string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return c, bufio.NewReader(c)
}

// A head that claims a body of max_body_bytes costs the server the bytes
// that arrive, not the claim. (Such a claim is net/http's on both fronts;
// internal/http1 tests the fast path's, up to its own limit.)
func TestClaimedBodyCostsWhatArrives(t *testing.T) {
	forEachFront(t, func(t *testing.T, f front) {
		answered := make(chan struct{}, 1)
		opts := Options{ObserveRequest: func(string, int, time.Duration) { answered <- struct{}{} }}
		url := f.serve(t, &fakeQueue{}, opts, redistest.Logger(t))
		const claimed = defaults.MaxBodyBytes
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		c, _ := dialServer(t, url)
		if _, err := fmt.Fprintf(c, "POST /push HTTP/1.1\r\nHost: q.example\r\nContent-Length: %d\r\n\r\n{", claimed); err != nil {
			t.Fatal(err)
		}
		c.Close() // the body ends early: the request is answered, and done
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatal("the request was not answered after its client left")
		}
		runtime.ReadMemStats(&after)
		if allocated := after.TotalAlloc - before.TotalAlloc; allocated > uint64(claimed/16) {
			t.Fatalf("serving a claim of %d bytes with 1 sent allocated %d bytes", claimed, allocated)
		}
	})
}

// A head that claims more than max_body_bytes is answered 413 at once, with
// none of the body read, and its connection closes.
func TestClaimedBodyOverTheLimitIsRefusedByItsHead(t *testing.T) {
	forEachFront(t, func(t *testing.T, f front) {
		url := f.serve(t, &fakeQueue{}, Options{}, redistest.Logger(t))
		c, br := dialServer(t, url)
		if _, err := fmt.Fprintf(c, "POST /push HTTP/1.1\r\nHost: q.example\r\nContent-Length: %d\r\n\r\n{", defaults.MaxBodyBytes+1); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("no answer before the body: %v", err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		got, problem := parseEnvelope(resp.StatusCode, resp.Header, raw)
		if problem != "" || got.status != 413 || got.code != 1 || !resp.Close ||
			got.msg != fmt.Sprintf("request body is larger than max_body_bytes (%d bytes)", defaults.MaxBodyBytes) {
			t.Fatalf("answer %d %v %s %s; want 413, code 1 and Connection: close", resp.StatusCode, resp.Header, raw, problem)
		}
	})
}

// A body that grows in pieces, or is already in memory, is read whole, and
// a short one fails as before.
func TestReadKnownLength(t *testing.T) {
	t.Parallel()
	want := strings.Repeat("0123456789", 10000) // past bodyBufferStart
	for _, tt := range []struct {
		name string
		r    io.Reader
	}{
		{"in memory", strings.NewReader(want)},
		{"in pieces", &oneByteReader{strings.NewReader(want)}},
		{"with EOF on the last bytes", &eofWithLastBytes{strings.NewReader(want)}},
	} {
		got, err := readKnownLength(tt.r, int64(len(want)))
		if err != nil || string(got) != want {
			t.Errorf("%s: %d bytes, %v; want %d bytes", tt.name, len(got), err, len(want))
		}
	}
	if _, err := readKnownLength(strings.NewReader("short"), 6); err != io.ErrUnexpectedEOF {
		t.Errorf("short body: %v, want io.ErrUnexpectedEOF", err)
	}
	if got, err := readKnownLength(http.NoBody, 0); err != nil || got == nil || len(got) != 0 {
		t.Errorf("empty body: %q %v, want an empty body", got, err)
	}
}

type oneByteReader struct{ r io.Reader }

func (r *oneByteReader) Read(p []byte) (int, error) { return r.r.Read(p[:min(len(p), 1)]) }

type eofWithLastBytes struct{ r *strings.Reader }

func (r *eofWithLastBytes) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err == nil && r.r.Len() == 0 {
		err = io.EOF
	}
	return n, err
}

// read_body_timeout bounds a body from when the handler reads it (on the
// fast path, from the end of its head): a slower one gets 408 and its
// connection is closed. Once the body is in, the deadline is lifted, so
// that a held pop outlives it (net/http watches a held request's
// connection by reading it, under that deadline).
func TestBodyReadTimeout(t *testing.T) {
	forEachFront(t, func(t *testing.T, f front) {
		q := &fakeQueue{popStarted: make(chan context.Context, 1)}
		opts := testOptions()
		opts.ReadBodyTimeout = 200 * time.Millisecond
		url := f.serve(t, q, opts, redistest.Logger(t))

		t.Run("slow body", func(t *testing.T) {
			c, br := dialServer(t, url)
			if _, err := io.WriteString(c, "POST /get HTTP/1.1\r\nHost: q.example\r\nContent-Length: 100\r\n\r\n{"); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatalf("no answer to a body slower than read_body_timeout: %v", err)
			}
			raw, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got, problem := parseEnvelope(resp.StatusCode, resp.Header, raw)
			want := "request body did not arrive within read_body_timeout (0.2 seconds)"
			if problem != "" || got.status != http.StatusRequestTimeout || got.code != 1 || got.msg != want || !resp.Close {
				t.Fatalf("answer %d %v %s %s, want 408, code 1, %q, Connection: close", resp.StatusCode, resp.Header, raw, problem, want)
			}
			f.checkVia(t, got, "/get", 100, opts)
			if _, err := br.ReadByte(); err != io.EOF {
				t.Fatalf("after the 408 the connection should close, read gave %v", err)
			}
		})
		t.Run("body in pieces within the timeout", func(t *testing.T) {
			c, br := dialServer(t, url)
			body := `{"id":"pieces"}`
			if _, err := fmt.Fprintf(c, "POST /get HTTP/1.1\r\nHost: q.example\r\nContent-Length: %d\r\n\r\n%s", len(body), body[:5]); err != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond) // a quarter of the timeout
			if _, err := io.WriteString(c, body[5:]); err != nil {
				t.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d, want 200", resp.StatusCode)
			}
		})
		t.Run("held pop outlives it", func(t *testing.T) {
			c, _ := dialServer(t, url)
			body := `{"topic":"t","timeout":10}`
			if _, err := fmt.Fprintf(c, "POST /pop HTTP/1.1\r\nHost: q.example\r\nContent-Length: %d\r\n\r\n%s", len(body), body); err != nil {
				t.Fatal(err)
			}
			ctx := <-q.popStarted
			select {
			case <-ctx.Done():
				t.Fatalf("the held pop was cancelled (%v) with its client still there", ctx.Err())
			case <-time.After(3 * opts.ReadBodyTimeout):
			}
			c.Close()
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
				t.Fatal("the held pop was not cancelled after its client left")
			}
		})
	})
}

// A client that sends requests and stops reading the answers loses its
// connection after write_timeout: the server's blocked write fails, it
// closes the connection, and the client's own blocked write then fails.
// Other clients are served meanwhile. A held /pop is not cut by the
// deadline: it starts when the hold ends.
func TestAClientThatStopsReadingLosesItsConnection(t *testing.T) {
	forEachFront(t, func(t *testing.T, f front) {
		q := &fakeQueue{popHolds: true, info: &delayqueue.JobInfo{ID: "big", Topic: "t", Body: strings.Repeat("b", 32<<10), State: "ready"}}
		url := f.serve(t, q, Options{WriteTimeout: time.Second, BlockTimeout: 3 * time.Second}, redistest.Logger(t))

		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
		request := []byte("POST /get HTTP/1.1\r\nHost: q.example\r\nContent-Length: 12\r\n\r\n{\"id\":\"big\"}")
		writerDone := make(chan error, 1)
		go func() {
			for {
				if _, err := c.Write(request); err != nil {
					writerDone <- err
					return
				}
			}
		}()
		redistest.WaitFor(t, 10*time.Second, "the server to answer some requests", func() bool { return len(q.recorded()) > 0 })

		// Another client is served while that one's answers pile up.
		if got := post(t, url, "/get", `{"id":"big"}`); got.code != 0 {
			t.Errorf("another client's /get: code %d %s", got.code, got.msg)
		}
		select {
		case err := <-writerDone:
			t.Logf("the client's writes end with %v", err)
		case <-time.After(20 * time.Second):
			t.Fatal("the connection of a client that reads nothing was still open 20 s after a write_timeout of 1 s")
		}

		// A held /pop answers after its hold, past write_timeout.
		start := time.Now()
		if got := post(t, url, "/pop", `{"topic":"idle","timeout":2}`); got.code != 0 || got.msg != "no job ready" || time.Since(start) < 2*time.Second {
			t.Errorf("held pop: code %d %q after %v; want no job after its 2 s hold", got.code, got.msg, time.Since(start))
		}
	})
}
