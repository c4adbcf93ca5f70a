package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"
)

// The event-loop client runs the single-request phases (push, pop-finish,
// http-floor): all their connections are driven from one goroutine that
// waits on epoll, in the manner of wrk and redis-benchmark. A goroutine per
// client costs the shared machine several microseconds per request in
// scheduling alone; the loop spends little more than the read and write
// system calls, leaving the two cores to the server and Redis it measures.
// Each connection carries one request at a time (no pipelining), exactly
// as a client goroutine would.

// loopRequest is one POST of payload to path.
type loopRequest struct {
	path    string
	payload []byte
}

// loopAnswer is the status and body of one answer. body is only valid
// during the step it is handed to.
type loopAnswer struct {
	status int
	body   []byte
}

// loopStep drives one connection: it is called with nil first, then with
// each answer, and returns the next request, or more=false to close the
// connection. An error stops the whole loop. Steps all run on the loop's
// goroutine, one at a time, so they may share state without locks.
type loopStep func(answer *loopAnswer) (next loopRequest, more bool, err error)

// errLoopUnsupported is returned by runLoop where there is no epoll.
var errLoopUnsupported = errors.New("the event-loop client needs Linux (use -loop=false)")

// loopTarget is the address the loop dials and the Host it sends.
type loopTarget struct {
	addr *net.TCPAddr
	host string
}

func resolveLoopTarget(baseURL string) (loopTarget, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return loopTarget{}, fmt.Errorf("server URL: %w", err)
	}
	if u.Scheme != "http" || u.Path != "" && u.Path != "/" {
		return loopTarget{}, fmt.Errorf("server URL %q: the event-loop client speaks plain http to a server root only (use -loop=false)", baseURL)
	}
	hostPort := u.Host
	if u.Port() == "" {
		hostPort = net.JoinHostPort(u.Hostname(), "80")
	}
	addr, err := net.ResolveTCPAddr("tcp", hostPort)
	if err != nil {
		return loopTarget{}, fmt.Errorf("server URL: %w", err)
	}
	return loopTarget{addr: addr, host: u.Host}, nil
}

// appendRequest appends req as an HTTP/1.1 request to b, with the same
// head as the lean client's.
func appendRequest(b []byte, host string, req loopRequest) []byte {
	b = append(b, "POST "...)
	b = append(b, req.path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, host...)
	b = append(b, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(req.payload)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, req.payload...)
}

// maxLoopAnswer bounds an answer the loop buffers: the single-request
// phases' answers are a few hundred bytes.
const maxLoopAnswer = 1 << 20

// parseAnswer looks for one complete answer at the start of in. It returns
// size 0 when more bytes are needed. 1xx answers are skipped. An answer
// without Content-Length (chunked, or running to the close), or one asking
// to close the connection, is an error: the loop keeps its connections
// open and frames answers by length.
func parseAnswer(in []byte) (a loopAnswer, size int, err error) {
	for {
		headEnd := bytes.Index(in, []byte("\r\n\r\n"))
		if headEnd < 0 {
			if len(in) > maxLoopAnswer {
				return loopAnswer{}, 0, fmt.Errorf("%w: head over %d bytes", errMalformedAnswer, maxLoopAnswer)
			}
			return loopAnswer{}, 0, nil
		}
		head := in[:headEnd]
		statusLine, fields, _ := bytes.Cut(head, []byte("\r\n"))
		if len(statusLine) < 12 || !bytes.HasPrefix(statusLine, []byte("HTTP/1.1 ")) {
			return loopAnswer{}, 0, fmt.Errorf("%w: status line %q", errMalformedAnswer, statusLine)
		}
		status, err := strconv.Atoi(string(statusLine[9:12]))
		if err != nil {
			return loopAnswer{}, 0, fmt.Errorf("%w: status line %q", errMalformedAnswer, statusLine)
		}
		length := -1
		for len(fields) > 0 {
			var line []byte
			line, fields, _ = bytes.Cut(fields, []byte("\r\n"))
			name, value, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				return loopAnswer{}, 0, fmt.Errorf("%w: header %q", errMalformedAnswer, line)
			}
			value = bytes.TrimSpace(value)
			switch {
			case bytes.EqualFold(name, []byte("Content-Length")):
				length, err = strconv.Atoi(string(value))
				if err != nil || length < 0 {
					return loopAnswer{}, 0, fmt.Errorf("%w: Content-Length %q", errMalformedAnswer, value)
				}
			case bytes.EqualFold(name, []byte("Transfer-Encoding")):
				return loopAnswer{}, 0, fmt.Errorf("the event-loop client reads no Transfer-Encoding (%q): use -loop=false", value)
			case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
				return loopAnswer{}, 0, errors.New("the server closes the connection after an answer; the event-loop client needs keep-alive (use -loop=false)")
			}
		}
		bodyStart := headEnd + 4
		if status >= 100 && status < 200 {
			in = in[bodyStart:]
			size += bodyStart
			continue
		}
		if length < 0 {
			return loopAnswer{}, 0, fmt.Errorf("the event-loop client needs a Content-Length (HTTP %d): use -loop=false", status)
		}
		if length > maxLoopAnswer {
			return loopAnswer{}, 0, fmt.Errorf("%w: body of %d bytes", errMalformedAnswer, length)
		}
		if len(in) < bodyStart+length {
			return loopAnswer{}, 0, nil
		}
		return loopAnswer{status: status, body: in[bodyStart : bodyStart+length]}, size + bodyStart + length, nil
	}
}

// failureCount counts failed requests of a loop phase: the phase goes on
// past a failure, as forEach does, until maxFailures.
type failureCount struct {
	n     int
	first error
}

func (f *failureCount) add(err error) error {
	if f.first == nil {
		f.first = err
	}
	f.n++
	if f.n >= maxFailures {
		return f.err()
	}
	return nil
}

func (f *failureCount) err() error {
	if f.n == 0 {
		return nil
	}
	return fmt.Errorf("%d requests failed, first: %w", f.n, f.first)
}

// appendPushPayload appends job as a /push body to b: the bytes
// json.Marshal writes, without its reflection (the tool's CPU is taken from
// the server it measures).
func appendPushPayload(b []byte, job pushJob) []byte {
	b = append(b, `{"topic":`...)
	b = appendJSONString(b, job.Topic)
	b = append(b, `,"id":`...)
	b = appendJSONString(b, job.ID)
	b = append(b, `,"delay":`...)
	b = strconv.AppendInt(b, job.Delay, 10)
	if job.DelayMS != nil {
		b = append(b, `,"delay_ms":`...)
		b = strconv.AppendInt(b, *job.DelayMS, 10)
	}
	b = append(b, `,"ttr":`...)
	b = strconv.AppendInt(b, job.TTR, 10)
	b = append(b, `,"body":`...)
	b = appendJSONString(b, job.Body)
	return append(b, '}')
}

// appendJSONString appends s as a JSON string, as json.Marshal writes it.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			quoted, _ := json.Marshal(s) // a string always encodes
			return append(b, quoted...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// pushLoop pushes total jobs built by makeJob on clients connections of
// the event loop and returns how many were acknowledged and how long it
// took.
func pushLoop(ctx context.Context, baseURL string, clients, total int, makeJob func(i int) pushJob) (int, time.Duration, error) {
	next, succeeded := 0, 0
	var payload []byte
	var failures failureCount
	step := func(a *loopAnswer) (loopRequest, bool, error) {
		if a != nil {
			if _, err := decodeEnvelope("/push", a.status, a.body); err != nil {
				if err := failures.add(err); err != nil {
					return loopRequest{}, false, err
				}
			} else {
				succeeded++
			}
		}
		if next >= total {
			return loopRequest{}, false, nil
		}
		// The loop copies the payload before the next step: one buffer
		// serves every request.
		payload = appendPushPayload(payload[:0], makeJob(next))
		next++
		return loopRequest{path: "/push", payload: payload}, true, nil
	}
	steps := make([]loopStep, min(clients, total))
	for i := range steps {
		steps[i] = step
	}
	start := time.Now()
	err := runLoop(ctx, baseURL, steps)
	took := time.Since(start)
	if err == nil {
		err = failures.err()
	}
	return succeeded, took, err
}

// popFinishLoop pops (single jobs, holding up to a second) and finishes
// total jobs of topic on consumers connections of the event loop, each
// doing pop then finish, and returns the time of the last finish.
func popFinishLoop(ctx context.Context, baseURL, topic string, total, consumers int) (time.Time, error) {
	popPayload, err := json.Marshal(struct {
		Topic   string `json:"topic"`
		Timeout int    `json:"timeout"`
	}{topic, 1})
	if err != nil {
		return time.Time{}, err
	}
	pop := loopRequest{path: "/pop", payload: popPayload}
	popped, finished := 0, 0
	var lastFinish time.Time
	var payload []byte // one buffer serves every finish (see pushLoop)
	var failures failureCount
	newStep := func() loopStep {
		var last string // path of the request answered next
		return func(a *loopAnswer) (loopRequest, bool, error) {
			if a != nil {
				r, err := decodeEnvelope(last, a.status, a.body)
				switch {
				case err != nil:
					if err := failures.add(err); err != nil {
						return loopRequest{}, false, err
					}
				case last == "/pop" && !r.dataIsNull():
					id, err := deliveredID(r.Data)
					if err != nil {
						return loopRequest{}, false, err
					}
					popped++
					payload = append(appendJSONString(append(payload[:0], `{"id":`...), id), '}')
					last = "/finish"
					return loopRequest{path: "/finish", payload: payload}, true, nil
				case last == "/finish":
					finished++
					if finished == total {
						lastFinish = time.Now()
					}
				}
			}
			if popped >= total {
				return loopRequest{}, false, nil
			}
			last = "/pop"
			return pop, true, nil
		}
	}
	steps := make([]loopStep, consumers)
	for i := range steps {
		steps[i] = newStep()
	}
	if err := runLoop(ctx, baseURL, steps); err != nil {
		return time.Time{}, fmt.Errorf("%w (%d of %d jobs popped, %d finished)", err, popped, total, finished)
	}
	if finished < total {
		if err := failures.err(); err != nil {
			return time.Time{}, fmt.Errorf("%d of %d jobs finished: %w", finished, total, err)
		}
		return time.Time{}, fmt.Errorf("%d of %d jobs finished", finished, total)
	}
	return lastFinish, nil
}

// deliveredID reads the id of a /pop answer's job. The server writes the
// id first; any other spelling goes through encoding/json.
func deliveredID(data []byte) (string, error) {
	if rest, ok := bytes.CutPrefix(data, []byte(`{"id":"`)); ok {
		if end := bytes.IndexAny(rest, `"\`); end > 0 && rest[end] == '"' {
			return string(rest[:end]), nil
		}
	}
	var d delivery
	if err := json.Unmarshal(data, &d); err != nil || d.ID == "" {
		return "", fmt.Errorf("POST /pop: data is not a job: %q", truncate(data, 200))
	}
	return d.ID, nil
}
