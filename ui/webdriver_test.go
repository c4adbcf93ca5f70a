package ui_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// This file is a small client of the W3C WebDriver protocol (JSON over
// HTTP), enough to drive the system's headless Chromium through Debian's
// chromedriver: no npm, no browser download.

// requireBrowserEnv names the environment variable that turns a missing
// chromium or chromedriver from a skip into a failure (CI sets it).
const requireBrowserEnv = "DQ_REQUIRE_BROWSER"

// webElementKey is the key of an element reference in WebDriver JSON.
const webElementKey = "element-6066-11e4-a52e-4f735466cecf"

// Viewport of every browser session: the size the page is laid out for.
const (
	viewportWidth  = 1280
	viewportHeight = 800
)

// browserTimeout bounds each wait on the page.
const browserTimeout = 15 * time.Second

// browserPrograms finds chromium and chromedriver, or skips the test (fails
// it when DQ_REQUIRE_BROWSER=1).
func browserPrograms(t *testing.T) (chromium, chromedriver string) {
	t.Helper()
	var missing []string
	chromium = lookPathAny(&missing, "chromium", "chromium-browser")
	chromedriver = lookPathAny(&missing, "chromedriver")
	if len(missing) > 0 {
		msg := fmt.Sprintf("%s not found in PATH (apt-get install chromium chromium-driver)", strings.Join(missing, " and "))
		if os.Getenv(requireBrowserEnv) == "1" {
			t.Fatalf("%s and %s=1", msg, requireBrowserEnv)
		}
		t.Skipf("%s: skipping the browser test (set %s=1 to make this a failure)", msg, requireBrowserEnv)
	}
	return chromium, chromedriver
}

func lookPathAny(missing *[]string, names ...string) string {
	for _, name := range names {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	*missing = append(*missing, names[0])
	return ""
}

// browser is one WebDriver session in a headless Chromium.
type browser struct {
	t       *testing.T
	base    string // chromedriver's URL, with /session/<id>
	client  *http.Client
	logPath string
}

// startBrowser starts chromedriver on a free loopback port, opens a session
// with a headless Chromium in a fresh profile, started with extraArgs too,
// and ends both when the test ends.
func startBrowser(t *testing.T, extraArgs ...string) *browser {
	t.Helper()
	chromium, chromedriver := browserPrograms(t)
	dir := t.TempDir()
	logPath := filepath.Join(dir, "chromedriver.log")
	port := redistest.FreePort(t)
	cmd := exec.Command(chromedriver, "--port="+strconv.Itoa(port), "--log-path="+logPath)
	// Its own process group, so that the browsers it started end with it
	// should a session not be closed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start chromedriver: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})

	b := &browser{t: t, base: "http://127.0.0.1:" + strconv.Itoa(port), client: &http.Client{Timeout: time.Minute}, logPath: logPath}
	b.waitDriverReady(exited)

	profile := filepath.Join(dir, "profile")
	args := []string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
		"--disable-background-networking", "--disable-component-update", "--disable-sync",
		"--disable-dev-shm-usage", "--user-data-dir=" + profile,
		fmt.Sprintf("--window-size=%d,%d", viewportWidth, viewportHeight),
		"--hide-scrollbars", "--force-device-scale-factor=1", "--lang=en-US",
	}
	args = append(args, extraArgs...)
	var session struct {
		SessionID string `json:"sessionId"`
	}
	b.call(http.MethodPost, "/session", map[string]any{
		"capabilities": map[string]any{"alwaysMatch": map[string]any{
			"browserName":      "chrome",
			"pageLoadStrategy": "normal",
			"goog:chromeOptions": map[string]any{
				"binary": chromium,
				"args":   args,
			},
		}},
	}, &session)
	if session.SessionID == "" {
		t.Fatal("chromedriver opened a session without an id")
	}
	b.base += "/session/" + session.SessionID
	t.Cleanup(func() {
		// Closes the browser; the process-group kill above is the fallback.
		req, _ := http.NewRequest(http.MethodDelete, b.base, nil)
		if resp, err := b.client.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	b.setViewport(viewportWidth, viewportHeight)
	return b
}

// waitDriverReady polls chromedriver's /status until it is ready.
func (b *browser) waitDriverReady(exited <-chan struct{}) {
	b.t.Helper()
	deadline := time.Now().Add(browserTimeout)
	for {
		resp, err := b.client.Get(b.base + "/status")
		if err == nil {
			var status struct {
				Value struct {
					Ready bool `json:"ready"`
				} `json:"value"`
			}
			decodeErr := json.NewDecoder(resp.Body).Decode(&status)
			resp.Body.Close()
			if decodeErr == nil && status.Value.Ready {
				return
			}
		}
		select {
		case <-exited:
			b.t.Fatalf("chromedriver exited at start: %s", b.driverLog())
		case <-time.After(25 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("chromedriver not ready after %s: %v; log: %s", browserTimeout, err, b.driverLog())
		}
	}
}

func (b *browser) driverLog() string {
	log, _ := os.ReadFile(b.logPath)
	const keep = 4000
	if len(log) > keep {
		log = log[len(log)-keep:]
	}
	return string(log)
}

// webDriverError is a WebDriver error answer.
type webDriverError struct {
	Code    string `json:"error"`
	Message string `json:"message"`
}

func (e *webDriverError) Error() string { return e.Code + ": " + e.Message }

// do sends one WebDriver command and decodes the answer's "value" into out.
func (b *browser) do(method, path string, body, out any) error {
	var reader io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		reader = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.base+path, reader)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.client.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("%s %s: read the answer: %w", method, path, err)
	}
	var answer struct {
		Value json.RawMessage `json:"value"`
	}
	if err := json.Unmarshal(raw, &answer); err != nil {
		return fmt.Errorf("%s %s: status %d, answer %.300s: %w", method, path, resp.StatusCode, raw, err)
	}
	if resp.StatusCode != http.StatusOK {
		wdErr := &webDriverError{}
		if err := json.Unmarshal(answer.Value, wdErr); err != nil || wdErr.Code == "" {
			return fmt.Errorf("%s %s: status %d, answer %.300s", method, path, resp.StatusCode, raw)
		}
		return fmt.Errorf("%s %s: %w", method, path, wdErr)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(answer.Value, out); err != nil {
		return fmt.Errorf("%s %s: decode %.300s: %w", method, path, answer.Value, err)
	}
	return nil
}

// call is do for commands that must succeed.
func (b *browser) call(method, path string, body, out any) {
	b.t.Helper()
	if err := b.do(method, path, body, out); err != nil {
		b.t.Fatalf("webdriver: %v", err)
	}
}

// setViewport sizes the window so that the page's viewport is w×h.
func (b *browser) setViewport(w, h int) {
	b.t.Helper()
	var inner []int
	b.call(http.MethodPost, "/window/rect", map[string]int{"width": w, "height": h}, nil)
	b.call(http.MethodPost, "/execute/sync", map[string]any{
		"script": "return [window.innerWidth, window.innerHeight]", "args": []any{}}, &inner)
	if len(inner) == 2 && (inner[0] != w || inner[1] != h) {
		b.call(http.MethodPost, "/window/rect", map[string]int{"width": 2*w - inner[0], "height": 2*h - inner[1]}, nil)
	}
}

// open navigates to url; WebDriver answers once the page has loaded.
func (b *browser) open(url string) {
	b.t.Helper()
	b.call(http.MethodPost, "/url", map[string]string{"url": url}, nil)
}

// eval runs a script (the body of a function; arguments in `arguments`)
// and decodes its return value into out.
func (b *browser) eval(out any, script string, args ...any) {
	b.t.Helper()
	if args == nil {
		args = []any{}
	}
	b.call(http.MethodPost, "/execute/sync", map[string]any{"script": script, "args": args}, out)
}

// find returns the element that matches a CSS selector, failing the test
// when there is none.
func (b *browser) find(selector string) string {
	b.t.Helper()
	id, err := b.findErr(selector)
	if err != nil {
		b.t.Fatalf("find %q: %v", selector, err)
	}
	return id
}

func (b *browser) findErr(selector string) (string, error) {
	var ref map[string]string
	if err := b.do(http.MethodPost, "/element", map[string]string{"using": "css selector", "value": selector}, &ref); err != nil {
		return "", err
	}
	return ref[webElementKey], nil
}

// click clicks the element that matches selector, as a user would (it must
// be visible and not covered).
func (b *browser) click(selector string) {
	b.t.Helper()
	id := b.find(selector)
	b.call(http.MethodPost, "/element/"+id+"/click", map[string]any{}, nil)
}

// typeInto clears the field that matches selector and types text into it.
func (b *browser) typeInto(selector, text string) {
	b.t.Helper()
	id := b.find(selector)
	b.call(http.MethodPost, "/element/"+id+"/clear", map[string]any{}, nil)
	b.call(http.MethodPost, "/element/"+id+"/value", map[string]string{"text": text}, nil)
}

// text returns the rendered text of the element that matches selector.
func (b *browser) text(selector string) string {
	b.t.Helper()
	var text string
	b.call(http.MethodGet, "/element/"+b.find(selector)+"/text", nil, &text)
	return text
}

// waitUntil evaluates a script returning a boolean until it returns true,
// failing the test after browserTimeout with what the page reads then. A
// script that throws (an element not there yet) counts as false.
func (b *browser) waitUntil(what, script string, args ...any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		var ok bool
		if args == nil {
			args = []any{}
		}
		err := b.do(http.MethodPost, "/execute/sync", map[string]any{"script": script, "args": args}, &ok)
		var wdErr *webDriverError
		if err != nil && !errors.As(err, &wdErr) {
			b.t.Fatalf("wait until %s: %v", what, err)
		}
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			var page string
			b.eval(&page, "return document.body.innerText")
			b.t.Fatalf("timed out after %s waiting until %s (last error: %v); the page reads:\n%s", browserTimeout, what, err, page)
		case <-tick.C:
		}
	}
}

// screenshot returns a PNG of the viewport.
func (b *browser) screenshot() []byte {
	b.t.Helper()
	var encoded string
	b.call(http.MethodGet, "/screenshot", nil, &encoded)
	png, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil {
		b.t.Fatalf("decode the screenshot: %v", err)
	}
	return png
}
