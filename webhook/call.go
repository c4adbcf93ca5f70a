package webhook

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delay-queue/delay-queue/delayqueue"
)

// Request headers every call carries.
const (
	HeaderID        = "X-DelayQueue-Id"
	HeaderTopic     = "X-DelayQueue-Topic"
	HeaderAttempt   = "X-DelayQueue-Attempt"
	HeaderTimestamp = "X-DelayQueue-Timestamp"
	HeaderSignature = "X-DelayQueue-Signature"
)

const (
	userAgent = "delay-queue-webhook"
	// maxErrorText bounds the error recorded for a failed call.
	maxErrorText = 300
	// dialTimeout bounds one connection attempt; the call's own timeout
	// usually ends it sooner.
	dialTimeout = 10 * time.Second
)

// Errors of a redirect the caller refuses to follow.
var (
	errTooManyRedirects    = fmt.Errorf("stopped after %d redirects", MaxRedirects)
	errRedirectCredentials = errors.New("redirect refused: its target URL carries credentials")
)

// Sign returns the X-DelayQueue-Signature of a call: the lowercase hex
// HMAC-SHA256, keyed with the secret, of timestamp + "." + body.
func Sign(secret, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// caller makes the HTTP calls. Both clients share one transport whose
// dialer refuses non-public addresses, so every connection, redirects
// included, is checked after DNS resolution. Which redirects are followed,
// and with which headers, is followRedirect's to say.
type caller struct {
	secret    string
	plain     *http.Client // redirects are answers (a failure)
	following *http.Client // redirects are followed, up to MaxRedirects
	transport *http.Transport
	maxKeep   int
	maxRead   int64
	now       func() time.Time
}

// callResult is the outcome of one call.
type callResult struct {
	status   int    // 0 when no response came
	class    string // a Result* constant
	errText  string // empty on success
	response string // the start of a failed call's response body
	latency  time.Duration
	// cut: the dispatcher stopped the call at the end of its shutdown grace.
	cut bool
}

func (r callResult) succeeded() bool { return r.class == Result2xx }

func newCaller(policy *AddressPolicy, opts Options) *caller {
	checked := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second, Control: policy.dialControl}
	// Hosts listed by name in callback_allow are trusted whatever they
	// resolve to.
	trusted := &net.Dialer{Timeout: dialTimeout, KeepAlive: 30 * time.Second}
	transport := &http.Transport{
		// No proxy: a proxy would make the connection, and the address
		// check would see the proxy instead of the destination.
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err == nil && policy.HostAllowed(host) {
				return trusted.DialContext(ctx, network, addr)
			}
			return checked.DialContext(ctx, network, addr)
		},
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           100,
		MaxIdleConnsPerHost:    opts.PerHost,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &caller{
		secret:    opts.Secret,
		transport: transport,
		plain: &http.Client{Transport: transport, CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		}},
		following: &http.Client{Transport: transport, CheckRedirect: followRedirect},
		maxKeep:   opts.MaxResponseBytes,
		maxRead:   int64(opts.MaxResponseRead),
		now:       time.Now,
	}
}

// followRedirect is the CheckRedirect of calls with follow_redirects. It
// refuses a target with credentials, which the client would otherwise send
// as Authorization: Basic (push refuses them in callback.url too). Once a hop
// has left the first URL's host and port, it sends only the delivery headers:
// the client would forward the job's own headers, where users put their
// credentials, and the signature, to whoever the redirect names. A 307 or
// 308 still repeats the body there, as HTTP requires.
func followRedirect(req *http.Request, via []*http.Request) error {
	if len(via) > MaxRedirects {
		return errTooManyRedirects
	}
	if req.URL.User != nil {
		status := ""
		if req.Response != nil {
			status = req.Response.Status + " to "
		}
		return fmt.Errorf("%w (%s%s)", errRedirectCredentials, status, redactURL(req.URL.String()))
	}
	if leftFirstOrigin(req, via) {
		req.Header = deliveryHeaders(req.Header)
	} else if req.ContentLength == 0 && via[0].ContentLength != 0 {
		// A 301, 302 or 303 made it a GET without the body the signature
		// is of: no receiver could check it.
		req.Header.Del(HeaderSignature)
	}
	return nil
}

// leftFirstOrigin reports whether req, or a hop before it, is for another
// origin than the first request. The client copies the first request's
// headers onto every hop, so a chain that comes back to the first host
// after another one is stripped too: the other host chose where it went.
func leftFirstOrigin(req *http.Request, via []*http.Request) bool {
	first := via[0].URL
	if !sameOrigin(first, req.URL) {
		return true
	}
	for _, hop := range via[1:] {
		if !sameOrigin(first, hop.URL) {
			return true
		}
	}
	return false
}

// sameOrigin reports whether a redirect from one URL to another stays with
// the same receiver: the same host name and port with the same scheme, or
// the upgrade from http on port 80 to https on port 443 of the same host
// name. Anything else, https to http included, is another receiver.
func sameOrigin(from, to *url.URL) bool {
	if !strings.EqualFold(from.Hostname(), to.Hostname()) {
		return false
	}
	fromPort, toPort := portOf(from), portOf(to)
	if from.Scheme == to.Scheme {
		return fromPort == toPort
	}
	return from.Scheme == "http" && fromPort == "80" && to.Scheme == "https" && toPort == "443"
}

// portOf is a URL's port, or its scheme's default port.
func portOf(u *url.URL) string {
	if port := u.Port(); port != "" {
		return port
	}
	switch u.Scheme {
	case "http":
		return "80"
	case "https":
		return "443"
	}
	return ""
}

// deliveryHeaders keeps the headers of a hop that any receiver may see: the
// X-DelayQueue-* headers other than the signature, and the server's own
// User-Agent. The job's headers, the signature and the Referer (the URL
// before, query included) are dropped.
func deliveryHeaders(h http.Header) http.Header {
	kept := http.Header{}
	for _, name := range []string{HeaderID, HeaderTopic, HeaderAttempt, HeaderTimestamp} {
		if value := h.Get(name); value != "" {
			kept.Set(name, value)
		}
	}
	kept.Set("User-Agent", userAgent)
	return kept
}

// newRequest builds the request of one call, headers and signature
// included.
func (c *caller) newRequest(ctx context.Context, job delayqueue.CallbackDelivery) (*http.Request, error) {
	method := job.Callback.Method
	if method == "" {
		method = http.MethodPost
	}
	req, err := http.NewRequestWithContext(ctx, method, job.Callback.URL, strings.NewReader(job.Body))
	if err != nil {
		return nil, err
	}
	for name, value := range job.Callback.Headers {
		req.Header.Set(name, value)
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", userAgent)
	}
	timestamp := strconv.FormatInt(c.now().Unix(), 10)
	req.Header.Set(HeaderID, job.ID)
	req.Header.Set(HeaderTopic, job.Topic)
	req.Header.Set(HeaderAttempt, strconv.Itoa(job.Attempts))
	req.Header.Set(HeaderTimestamp, timestamp)
	if c.secret != "" {
		req.Header.Set(HeaderSignature, Sign(c.secret, timestamp, []byte(job.Body)))
	}
	return req, nil
}

// call makes one call within the job's timeout. stop is cancelled when the
// dispatcher's shutdown grace ends.
func (c *caller) call(stop context.Context, job delayqueue.CallbackDelivery) callResult {
	timeout := job.Callback.Timeout()
	ctx, cancel := context.WithTimeout(stop, timeout)
	defer cancel()
	req, err := c.newRequest(ctx, job)
	if err != nil {
		return callResult{class: ResultConnectionError, errText: shorten("invalid request: " + err.Error())}
	}
	client := c.plain
	if job.Callback.FollowRedirects {
		client = c.following
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		res := c.classifyError(stop, ctx, timeout, err)
		if resp != nil { // CheckRedirect refused to go on: resp is the last redirect
			res.status = resp.StatusCode
		}
		res.latency = time.Since(start)
		return res
	}
	defer resp.Body.Close()
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, c.maxRead))
	res := callResult{status: resp.StatusCode, class: statusClass(resp.StatusCode), latency: time.Since(start)}
	if res.succeeded() {
		// The receiver said yes; a body cut short does not change that.
		return res
	}
	res.response = truncateUTF8(body, c.maxKeep)
	switch {
	case res.class == Result3xx:
		res.errText = fmt.Sprintf("redirect not followed (follow_redirects is false): %s to %q", resp.Status, resp.Header.Get("Location"))
		if job.Callback.FollowRedirects {
			res.errText = fmt.Sprintf("redirect without a usable Location: %s", resp.Status)
		}
	case readErr != nil && stop.Err() != nil:
		res.cut = true
		res.errText = "cut by shutdown while reading the response"
	default:
		res.errText = resp.Status
	}
	res.errText = shorten(res.errText)
	return res
}

// classifyError turns a failed client.Do into a result.
func (c *caller) classifyError(stop, call context.Context, timeout time.Duration, err error) callResult {
	var netErr net.Error
	switch {
	case errors.Is(err, ErrAddressRefused):
		return callResult{class: ResultRefused, errText: shorten(innerError(err))}
	case errors.Is(err, errTooManyRedirects):
		return callResult{class: Result3xx, errText: errTooManyRedirects.Error()}
	case errors.Is(err, errRedirectCredentials):
		return callResult{class: Result3xx, errText: shorten(innerError(err))}
	case stop.Err() != nil:
		return callResult{class: ResultConnectionError, errText: "cut by shutdown", cut: true}
	case errors.Is(call.Err(), context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		return callResult{class: ResultTimeout, errText: fmt.Sprintf("timeout: no answer within %s", timeout)}
	default:
		return callResult{class: ResultConnectionError, errText: shorten(innerError(err))}
	}
}

// innerError drops the `Post "url": ` prefix of a client error: the URL is
// in the job already.
func innerError(err error) string {
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return urlErr.Err.Error()
	}
	return err.Error()
}

func statusClass(status int) string {
	switch {
	case status >= 200 && status < 300:
		return Result2xx
	case status >= 300 && status < 400:
		return Result3xx
	case status >= 400 && status < 500:
		return Result4xx
	case status >= 500 && status < 600:
		return Result5xx
	default:
		return ResultOther
	}
}

func shorten(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	return truncateUTF8([]byte(s), maxErrorText-3) + "..."
}

// truncateUTF8 keeps at most n bytes of b, without splitting a character
// at the cut.
func truncateUTF8(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	b = b[:n]
	for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
		r, size := utf8.DecodeLastRune(b)
		if r != utf8.RuneError || size != 1 {
			break
		}
		b = b[:len(b)-1]
	}
	return string(b)
}

// redactURL is a URL fit for logs: without its query, which often holds a
// token.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.RawQuery, u.Fragment, u.User = "", "", nil
	return u.String()
}
