package webhook

import (
	"fmt"
	"time"

	"github.com/delay-queue/delay-queue/internal/defaults"
)

// Defaults of Options that no conf key sets; those it sets
// (callback_concurrency, callback_per_host, callback_shutdown_grace) are
// internal/defaults'.
const (
	DefaultMaxResponseBytes = 1024
	DefaultMaxResponseRead  = 64 * 1024
	// MaxRedirects is how many redirects a call with follow_redirects
	// follows before it counts as failed.
	MaxRedirects = 5
)

// Result classes of a call, as counted by Metrics.
const (
	Result2xx             = "2xx"
	Result3xx             = "3xx" // a redirect that was not followed
	Result4xx             = "4xx"
	Result5xx             = "5xx"
	ResultTimeout         = "timeout"
	ResultConnectionError = "connection_error"
	// ResultRefused: the destination address is not public and not in
	// callback_allow; no connection was made.
	ResultRefused = "refused"
	// ResultOther: a status outside 200…599 (nothing 1xx reaches here).
	ResultOther = "other"
)

// Metrics receives one observation per call. *metrics.Metrics implements it;
// a nil Metrics observes nothing.
type Metrics interface {
	// ObserveWebhookCall counts a call by result class (one of the Result*
	// constants) and records how long it took.
	ObserveWebhookCall(result string, latency time.Duration)
}

// Options configure a Dispatcher. Zero values take the defaults.
type Options struct {
	// Secret (callback_secret) signs every call: X-DelayQueue-Signature is
	// the lowercase hex HMAC-SHA256 of timestamp + "." + body. Empty: no
	// signature header.
	Secret string
	// Allow (callback_allow) lists the host names, host suffixes (".corp"),
	// IP addresses and CIDRs that may be called although they are not
	// public. See NewAddressPolicy.
	Allow []string
	// Concurrency bounds the jobs one dispatcher holds at once, calling or
	// waiting for their host (callback_concurrency).
	Concurrency int
	// PerHost bounds the calls in flight to one destination host
	// (callback_per_host).
	PerHost int
	// MaxResponseBytes is how much of a failed call's response body is kept
	// for /get and the dead letters.
	MaxResponseBytes int
	// MaxResponseRead is how much of a response body is read at most; the
	// rest is not read and the connection is closed.
	MaxResponseRead int
	// ShutdownGrace is how long calls in flight may go on once Run's context
	// is done; calls still running then are cut and given back. 0 means
	// defaults.CallbackShutdownGrace.
	ShutdownGrace time.Duration
	// WakeTimeout is how long the dispatcher waits for a wake-up
	// (Queue.WaitCallbacks) before claiming anyway (a safety net for lost
	// wake-ups). 0 means 1s.
	WakeTimeout time.Duration
	// Metrics, when not nil, observes every call.
	Metrics Metrics
}

func (o Options) withDefaults() (Options, error) {
	if o.Concurrency < 0 || o.PerHost < 0 || o.MaxResponseBytes < 0 || o.MaxResponseRead < 0 || o.ShutdownGrace < 0 || o.WakeTimeout < 0 {
		return o, fmt.Errorf("webhook options must not be negative: %+v", o)
	}
	if o.Concurrency == 0 {
		o.Concurrency = defaults.CallbackConcurrency
	}
	if o.PerHost == 0 {
		o.PerHost = defaults.CallbackPerHost
	}
	if o.MaxResponseBytes == 0 {
		o.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if o.MaxResponseRead == 0 {
		o.MaxResponseRead = DefaultMaxResponseRead
	}
	if o.MaxResponseRead < o.MaxResponseBytes {
		o.MaxResponseRead = o.MaxResponseBytes
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = defaults.CallbackShutdownGrace
	}
	if o.WakeTimeout == 0 {
		o.WakeTimeout = time.Second
	}
	return o, nil
}
