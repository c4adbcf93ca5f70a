package ui_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/delay-queue/delay-queue/ui"
)

// serve sends one request to a fresh Handler and returns the recorded answer.
func serve(t *testing.T, method, path string, header http.Header) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for k, v := range header {
		req.Header[k] = v
	}
	rec := httptest.NewRecorder()
	ui.Handler().ServeHTTP(rec, req)
	return rec
}

func embedded(t *testing.T, name string) []byte {
	t.Helper()
	content, err := os.ReadFile(filepath.Join("static", name)) // what the build embedded
	if err != nil {
		t.Fatalf("read embedded %s: %v", name, err)
	}
	return content
}

func TestAssetsAreServedWithTheirContentTypes(t *testing.T) {
	tests := []struct {
		path        string
		file        string
		contentType string
		contains    string
	}{
		{"/ui/", "index.html", "text/html; charset=utf-8", "<!DOCTYPE html>"},
		{"/ui/app.js", "app.js", "text/javascript; charset=utf-8", "'use strict';"},
		{"/ui/style.css", "style.css", "text/css; charset=utf-8", ".topbar"},
		{"/ui/favicon.svg", "favicon.svg", "image/svg+xml", "<svg"},
		// Where browsers look for an icon on pages that name none.
		{"/favicon.ico", "favicon.svg", "image/svg+xml", "<svg"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			rec := serve(t, http.MethodGet, tt.path, nil)
			if rec.Code != http.StatusOK {
				t.Fatalf("GET %s: status %d, want 200", tt.path, rec.Code)
			}
			if got := rec.Header().Get("Content-Type"); got != tt.contentType {
				t.Errorf("Content-Type %q, want %q", got, tt.contentType)
			}
			if got := rec.Header().Get("X-Content-Type-Options"); got != "nosniff" {
				t.Errorf("X-Content-Type-Options %q, want nosniff", got)
			}
			csp := rec.Header().Get("Content-Security-Policy")
			for _, directive := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
				if !strings.Contains(csp, directive) {
					t.Errorf("Content-Security-Policy %q lacks %q", csp, directive)
				}
			}
			body := rec.Body.String()
			if body != string(embedded(t, tt.file)) {
				t.Errorf("GET %s did not answer the embedded %s", tt.path, tt.file)
			}
			if !strings.Contains(body, tt.contains) {
				t.Errorf("GET %s: the embedded %s does not contain %q", tt.path, tt.file, tt.contains)
			}
		})
	}
}

func TestHeadAndRevalidation(t *testing.T) {
	head := serve(t, http.MethodHead, "/ui/app.js", nil)
	if head.Code != http.StatusOK || head.Body.Len() != 0 {
		t.Fatalf("HEAD: status %d with %d body bytes, want 200 and none", head.Code, head.Body.Len())
	}
	if got, want := head.Header().Get("Content-Length"), strconv.Itoa(len(embedded(t, "app.js"))); got != want {
		t.Errorf("HEAD Content-Length %q, want %s", got, want)
	}
	etag := head.Header().Get("ETag")
	if etag == "" || head.Header().Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q: want an ETag and no-cache", etag, head.Header().Get("Cache-Control"))
	}
	again := serve(t, http.MethodGet, "/ui/app.js", http.Header{"If-None-Match": {etag}})
	if again.Code != http.StatusNotModified {
		t.Errorf("GET with If-None-Match of the current ETag: status %d, want 304", again.Code)
	}
	other := serve(t, http.MethodGet, "/ui/style.css", nil).Header().Get("ETag")
	if other == etag {
		t.Errorf("app.js and style.css share the ETag %s", etag)
	}
}

func TestOtherRequests(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		path     string
		status   int
		location string
		allow    string
	}{
		{"prefix redirects to the page, relatively", http.MethodGet, "/ui", http.StatusMovedPermanently, "ui/", ""},
		{"index.html has one address", http.MethodGet, "/ui/index.html", http.StatusNotFound, "", ""},
		{"unknown file", http.MethodGet, "/ui/missing.js", http.StatusNotFound, "", ""},
		{"directory of the embedded files", http.MethodGet, "/ui/static/app.js", http.StatusNotFound, "", ""},
		{"POST", http.MethodPost, "/ui/", http.StatusMethodNotAllowed, "", "GET, HEAD"},
		{"DELETE", http.MethodDelete, "/ui/app.js", http.StatusMethodNotAllowed, "", "GET, HEAD"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := serve(t, tt.method, tt.path, nil)
			if rec.Code != tt.status {
				t.Fatalf("%s %s: status %d, want %d", tt.method, tt.path, rec.Code, tt.status)
			}
			if got := rec.Header().Get("Location"); got != tt.location {
				t.Errorf("Location %q, want %q", got, tt.location)
			}
			if got := rec.Header().Get("Allow"); got != tt.allow {
				t.Errorf("Allow %q, want %q", got, tt.allow)
			}
		})
	}
}

// The page must work offline and leak nothing: every file it loads is one
// of ours, and no asset names another origin.
func TestNoExternalReferences(t *testing.T) {
	external := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}|@import|url\(\s*['"]?(https?:|//)`)
	// The SVG namespace is an identifier, never fetched.
	const svgNamespace = "http://www.w3.org/2000/svg"
	for _, name := range []string{"index.html", "app.js", "style.css"} {
		content := strings.ReplaceAll(string(embedded(t, name)), svgNamespace, "")
		if m := external.FindString(content); m != "" {
			t.Errorf("%s references %q: the dashboard must not fetch anything from elsewhere", name, m)
		}
	}

	index := string(embedded(t, "index.html"))
	refs := regexp.MustCompile(`(?i)\b(?:src|href)\s*=\s*"([^"]*)"`).FindAllStringSubmatch(index, -1)
	if len(refs) == 0 {
		t.Fatal("index.html loads nothing: expected its script and style sheet")
	}
	loaded := map[string]bool{}
	for _, ref := range refs {
		target := ref[1]
		loaded[target] = true
		if strings.Contains(target, ":") || strings.HasPrefix(target, "/") {
			t.Errorf("index.html references %q: want a path relative to the page", target)
			continue
		}
		if rec := serve(t, http.MethodGet, "/ui/"+target, nil); rec.Code != http.StatusOK {
			t.Errorf("index.html loads %q, which answers %d", target, rec.Code)
		}
	}
	for _, want := range []string{"app.js", "style.css"} {
		if !loaded[want] {
			t.Errorf("index.html does not load %s", want)
		}
	}
	if regexp.MustCompile(`(?i)<script(?:\s[^>]*)?>[^<]+</script>|\son[a-z]+\s*=`).MatchString(index) {
		t.Error("index.html has inline script or an on* handler attribute, which the content security policy blocks")
	}
}

// Job data must never be parsed as HTML: the page writes it with
// textContent. This guards against a later edit that reaches for innerHTML.
func TestScriptNeverParsesHTML(t *testing.T) {
	script := string(embedded(t, "app.js"))
	for _, sink := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"} {
		if strings.Contains(script, sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
	if !strings.Contains(script, "sessionStorage") || strings.Contains(script, "localStorage") || strings.Contains(script, "document.cookie") {
		t.Error("app.js must keep the token in sessionStorage only")
	}
}

func TestHandlerServesThroughAServer(t *testing.T) {
	srv := httptest.NewServer(ui.Handler())
	defer srv.Close()
	// The client follows the relative redirect from /ui to /ui/.
	resp, err := http.Get(srv.URL + "/ui")
	if err != nil {
		t.Fatalf("GET /ui: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if resp.StatusCode != http.StatusOK || resp.Request.URL.Path != "/ui/" || !strings.Contains(string(body), "<title>delay-queue dashboard</title>") {
		t.Fatalf("GET /ui ended at %s with status %d: want the page at /ui/", resp.Request.URL.Path, resp.StatusCode)
	}
}
