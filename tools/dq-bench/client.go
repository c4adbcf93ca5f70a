package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// apiClient speaks the server's HTTP API as a real client does: JSON bodies,
// POST, keep-alive connections shared by all goroutines of a phase.
type apiClient struct {
	http poster
}

// newAPIClient returns a client of the given kind (clientLean or
// clientStd) that keeps up to maxConns idle connections to the server.
func newAPIClient(kind, baseURL string, maxConns int) (*apiClient, error) {
	p, err := newPoster(kind, baseURL, maxConns)
	if err != nil {
		return nil, err
	}
	return &apiClient{http: p}, nil
}

// close drops the client's idle connections.
func (c *apiClient) close() { c.http.close() }

// reply is the server's envelope with data left undecoded, so each caller
// can tell the shapes apart (an object, an array, null).
type reply struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data"`
}

// dataIsNull reports whether data is absent or JSON null.
func (r reply) dataIsNull() bool {
	d := bytes.TrimSpace(r.Data)
	return len(d) == 0 || bytes.Equal(d, []byte("null"))
}

// dataIsArray reports whether data is a JSON array.
func (r reply) dataIsArray() bool {
	d := bytes.TrimSpace(r.Data)
	return len(d) > 0 && d[0] == '['
}

// errCodeFailure is wrapped by call when the server answers code 1.
var errCodeFailure = errors.New("server answered code 1")

// call posts body (marshalled to JSON) to path and decodes the envelope. A
// transport failure, a non-JSON answer or code 1 is an error; the reply is
// returned in every case where one was decoded.
func (c *apiClient) call(ctx context.Context, path string, body any, hold bool) (reply, error) {
	payload, err := json.Marshal(body)
	if err != nil {
		return reply{}, fmt.Errorf("encode %s request: %w", path, err)
	}
	status, raw, err := c.http.post(ctx, path, payload, hold)
	if err != nil {
		return reply{}, fmt.Errorf("POST %s: %w", path, err)
	}
	return decodeEnvelope(path, status, raw)
}

// decodeEnvelope decodes the answer raw to a POST of path: a non-envelope
// or code 1 is an error; the reply is returned whenever one was decoded.
func decodeEnvelope(path string, status int, raw []byte) (reply, error) {
	r, ok := quickEnvelope(raw)
	if !ok {
		if err := json.Unmarshal(raw, &r); err != nil {
			return reply{}, fmt.Errorf("POST %s: HTTP %d, answer is not an envelope: %q", path, status, truncate(raw, 200))
		}
	}
	if r.Code != 0 {
		return r, fmt.Errorf("POST %s: HTTP %d: %q: %w", path, status, r.Message, errCodeFailure)
	}
	return r, nil
}

// quickEnvelope reads the envelope the way the server writes it,
// {"code":N,"message":"...","data":...} with no spaces, without a full JSON
// decode: the tool's CPU is taken from the server it measures. ok is false
// for any other spelling, which the caller then decodes with encoding/json.
// data is not validated here; the callers that use it decode it.
func quickEnvelope(raw []byte) (r reply, ok bool) {
	rest, found := bytes.CutPrefix(bytes.TrimRight(raw, "\n"), []byte(`{"code":`))
	if !found {
		return reply{}, false
	}
	digits := 0
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		digits++
	}
	code, err := strconv.Atoi(string(rest[:digits]))
	if err != nil {
		return reply{}, false
	}
	rest, found = bytes.CutPrefix(rest[digits:], []byte(`,"message":"`))
	if !found {
		return reply{}, false
	}
	end := 0
	for end < len(rest) && rest[end] != '"' {
		if rest[end] == '\\' || rest[end] < 0x20 {
			return reply{}, false // escapes: leave them to the decoder
		}
		end++
	}
	message := string(rest[:end])
	rest, found = bytes.CutPrefix(rest[min(end+1, len(rest)):], []byte(`,"data":`))
	if !found || len(rest) < 2 || rest[len(rest)-1] != '}' {
		return reply{}, false
	}
	return reply{Code: code, Message: message, Data: rest[:len(rest)-1]}, true
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "..."
}

// pushJob is one job as /push takes it. DelayMS, when set, replaces Delay
// (the server's delay_ms field).
type pushJob struct {
	Topic   string `json:"topic"`
	ID      string `json:"id"`
	Delay   int64  `json:"delay"`
	DelayMS *int64 `json:"delay_ms,omitempty"`
	TTR     int64  `json:"ttr"`
	Body    string `json:"body"`
}

// withDelayMS returns j with delay_ms set.
func (j pushJob) withDelayMS(ms int64) pushJob {
	j.DelayMS = &ms
	return j
}

// delivery is the data of a /pop that got a job.
type delivery struct {
	ID       string `json:"id"`
	Body     string `json:"body"`
	Topic    string `json:"topic"`
	TTR      int64  `json:"ttr"`
	Attempts int    `json:"attempts"`
}

func (c *apiClient) push(ctx context.Context, job pushJob) error {
	_, err := c.call(ctx, "/push", job, false)
	return err
}

// pushBatch sends {"jobs":[...]} (a batch push).
func (c *apiClient) pushBatch(ctx context.Context, jobs []pushJob) (reply, error) {
	return c.call(ctx, "/push", struct {
		Jobs []pushJob `json:"jobs"`
	}{jobs}, false)
}

// pop asks for one job of topics (comma-separated) and holds up to
// timeoutSeconds. It returns nil when the hold ended empty.
func (c *apiClient) pop(ctx context.Context, topics string, timeoutSeconds int) (*delivery, error) {
	r, err := c.call(ctx, "/pop", struct {
		Topic   string `json:"topic"`
		Timeout int    `json:"timeout"`
	}{topics, timeoutSeconds}, timeoutSeconds > 0)
	if err != nil {
		return nil, err
	}
	if r.dataIsNull() {
		return nil, nil
	}
	var d delivery
	if err := json.Unmarshal(r.Data, &d); err != nil {
		return nil, fmt.Errorf("POST /pop: data is not a job: %q", truncate(r.Data, 200))
	}
	return &d, nil
}

// errBatchShape means the server answered a batch request with code 0 but
// not in the batch shape: it ignored the batch field.
var errBatchShape = errors.New("answer is not in the batch shape")

// popBatch asks for up to count jobs ("count"); the
// answer must be an array.
func (c *apiClient) popBatch(ctx context.Context, topics string, timeoutSeconds, count int) ([]delivery, error) {
	r, err := c.call(ctx, "/pop", struct {
		Topic   string `json:"topic"`
		Timeout int    `json:"timeout"`
		Count   int    `json:"count"`
	}{topics, timeoutSeconds, count}, timeoutSeconds > 0)
	if err != nil {
		return nil, err
	}
	if !r.dataIsArray() {
		return nil, fmt.Errorf("POST /pop with count: data %q: %w", truncate(r.Data, 100), errBatchShape)
	}
	var ds []delivery
	if err := json.Unmarshal(r.Data, &ds); err != nil {
		return nil, fmt.Errorf("POST /pop with count: data is not a list of jobs: %w", err)
	}
	return ds, nil
}

func (c *apiClient) finish(ctx context.Context, id string) error {
	_, err := c.call(ctx, "/finish", struct {
		ID string `json:"id"`
	}{id}, false)
	return err
}

// finishBatch sends {"ids":[...]} (a batch finish).
func (c *apiClient) finishBatch(ctx context.Context, ids []string) error {
	_, err := c.call(ctx, "/finish", struct {
		IDs []string `json:"ids"`
	}{ids}, false)
	return err
}

// exists reports whether /get knows id.
func (c *apiClient) exists(ctx context.Context, id string) (bool, error) {
	r, err := c.call(ctx, "/get", struct {
		ID string `json:"id"`
	}{id}, false)
	if err != nil {
		return false, err
	}
	return !r.dataIsNull(), nil
}
