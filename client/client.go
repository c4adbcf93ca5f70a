// Package client is a Go client for the delay-queue HTTP API: typed methods
// for every endpoint (push, pop, finish, delete, get, release, touch, stats,
// topics and the dead letters), and a Worker that runs a consumer loop with
// concurrency, lease renewal, retries and a graceful stop.
//
// Every method takes a context.Context and returns either a *APIError, when
// the server answered with code 1 (or a 4xx envelope), or a transport error
// (connection refused, timeout, an answer that is not the server's JSON),
// which is never a *APIError. A batch the server did only in part (some of
// Redis unavailable) comes back as a *PartialBatchError, which wraps the
// *APIError: use errors.As, not a type assertion.
//
// The JSON bodies are package wire's, the ones the server writes: the
// types here that have no Go form of their own (durations, times) are
// aliases of them.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/delay-queue/delay-queue/wire"
)

// DefaultRequestTimeout bounds every request when WithRequestTimeout is not
// given. A /pop gets its hold on top of it.
const DefaultRequestTimeout = 30 * time.Second

// defaultUserAgent is sent unless WithUserAgent replaces it.
const defaultUserAgent = "delay-queue-go-client"

// maxAnswerBytes bounds how much of an answer is read: the largest legal
// answer is a /pop of 100 jobs with bodies of max_job_body_bytes each.
const maxAnswerBytes = 256 << 20

// Client talks to one delay-queue server. It is safe for concurrent use.
type Client struct {
	baseURL        string
	token          string
	userAgent      string
	http           *http.Client
	requestTimeout time.Duration
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends "Authorization: Bearer <token>" with every request, for a
// server started with auth_token (or DQ_AUTH_TOKEN).
func WithToken(token string) Option {
	return func(c *Client) { c.token = token }
}

// WithHTTPClient replaces the *http.Client used for requests (for TLS
// settings, a proxy or a custom transport). Leave its Timeout at zero: the
// client bounds each request through its context instead, and a Timeout
// shorter than a pop's hold would cut the long poll (Pop refuses to start
// such a request).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.http = hc
		}
	}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(userAgent string) Option {
	return func(c *Client) { c.userAgent = userAgent }
}

// WithRequestTimeout bounds each request (DefaultRequestTimeout when not
// given). A pop may take its hold plus this timeout. Zero or negative
// values keep the default.
func WithRequestTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.requestTimeout = d
		}
	}
}

// New returns a client of the server at baseURL, such as
// "http://127.0.0.1:9277". A trailing slash is ignored.
func New(baseURL string, opts ...Option) *Client {
	c := &Client{
		baseURL:        strings.TrimRight(baseURL, "/"),
		userAgent:      defaultUserAgent,
		http:           &http.Client{},
		requestTimeout: DefaultRequestTimeout,
	}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

// BaseURL returns the server address the client was built with.
func (c *Client) BaseURL() string { return c.baseURL }

// APIError is an answer of the server that carries its envelope with code 1:
// invalid input, a job in the wrong state, Redis unavailable (all with HTTP
// 200), or a refused request (401, 403, 404, 405, 413).
type APIError struct {
	// Code is the envelope's code (1 for every failure).
	Code int
	// Message is the server's explanation, in English.
	Message string
	// HTTPStatus is the answer's status code.
	HTTPStatus int
	// Data is the envelope's data, when the failure carries some: the bad
	// jobs of a rejected batch push, the result of a partly refused batch
	// finish, or every job's or id's status of a batch done in part (see
	// PartialBatchError). Nil otherwise.
	Data json.RawMessage
	// Endpoint is the path that was called, such as "/push".
	Endpoint string
}

func (e *APIError) Error() string {
	if e.HTTPStatus != http.StatusOK {
		return fmt.Sprintf("%s: %s (HTTP %d)", e.Endpoint, e.Message, e.HTTPStatus)
	}
	return fmt.Sprintf("%s: %s", e.Endpoint, e.Message)
}

// ErrUnexpectedAnswer is wrapped by the transport error returned when the
// server's answer is not a delay-queue envelope, such as an HTML error page
// from a proxy.
var ErrUnexpectedAnswer = errors.New("unexpected answer")

// envelope is every answer's body, with its code a pointer (shadowing the
// embedded one): an answer without a code is not the server's.
type envelope struct {
	wire.Envelope[json.RawMessage]
	Code *int `json:"code"`
}

// Call posts request (marshalled to JSON) to path and decodes the envelope's
// data into data, unless data is nil. A json.RawMessage keeps the data as
// the server sent it ("null" when there is none). The typed methods are
// built on it; it is exported for endpoints this package does not know yet.
func (c *Client) Call(ctx context.Context, path string, request, data any) error {
	return c.call(ctx, path, request, data, c.requestTimeout)
}

// call is Call with an explicit deadline for the whole exchange.
func (c *Client) call(ctx context.Context, path string, request, data any, timeout time.Duration) error {
	body, err := json.Marshal(request)
	if err != nil {
		return fmt.Errorf("%s: encode the request: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: build the request: %w", path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return fmt.Errorf("%s: read the answer: %w", path, err)
	}

	var env envelope
	if err := json.Unmarshal(raw, &env); err != nil || env.Code == nil {
		return fmt.Errorf("%s: %w: HTTP %d, %s", path, ErrUnexpectedAnswer, resp.StatusCode, preview(raw))
	}
	if *env.Code != wire.CodeSuccess || resp.StatusCode != http.StatusOK {
		apiErr := &APIError{Code: *env.Code, Message: env.Message, HTTPStatus: resp.StatusCode, Endpoint: path}
		if len(env.Data) > 0 && string(env.Data) != "null" {
			apiErr.Data = env.Data
		}
		return apiErr
	}
	if data == nil {
		return nil
	}
	if raw, ok := data.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], env.Data...)
		if len(*raw) == 0 {
			*raw = json.RawMessage("null")
		}
		return nil
	}
	if err := json.Unmarshal(env.Data, data); err != nil {
		return fmt.Errorf("%s: %w: decode the data: %v", path, ErrUnexpectedAnswer, err)
	}
	return nil
}

// preview quotes the start of an unexpected answer for an error message.
func preview(raw []byte) string {
	const limit = 200
	if len(raw) > limit {
		return fmt.Sprintf("%q...", raw[:limit])
	}
	return fmt.Sprintf("%q", raw)
}

// IsLeaseLost reports whether err is the server refusing a release, a touch
// or a FinishDelivery because the delivery is no longer the caller's: the job is unknown,
// finished, dead-lettered, not reserved, or delivered again since (a stale
// receipt). Acting further on that delivery is pointless.
func IsLeaseLost(err error) bool {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.HTTPStatus != http.StatusOK {
		return false
	}
	for _, prefix := range []string{wire.MsgJobNotFound, wire.MsgNotReserved, wire.MsgJobDead, wire.MsgStaleDelivery} {
		if strings.HasPrefix(apiErr.Message, prefix) {
			return true
		}
	}
	return false
}
