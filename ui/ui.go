// Package ui owns the web dashboard: a single page (HTML, JavaScript and CSS
// embedded in the binary) that shows the queue through the HTTP API the page
// calls from the browser. It serves static files only: no data passes
// through it, and nothing is fetched from elsewhere at run time.
package ui

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

// IconPath is where browsers look for a site's icon when a page names
// none: the handler answers it with the dashboard's icon (the page names
// its own, favicon.svg), so that a browser opening any path of the server
// gets an icon rather than a 404 in the request log.
const IconPath = "/favicon.ico"

// Prefix is the path the dashboard is served under. The page itself is at
// Prefix + "/"; Prefix alone redirects there, so that the page's relative
// links (its assets, and "../push" style API calls) resolve the same way
// behind a reverse proxy that adds a path prefix.
const Prefix = "/ui"

// static holds the page's files, read at build time.
//
//go:embed static
var static embed.FS

// contentType returns the content type of an embedded file by its
// extension, set explicitly rather than guessed from the platform's MIME
// tables, which differ between machines; "" for an unknown extension.
func contentType(name string) string {
	switch {
	case strings.HasSuffix(name, ".html"):
		return "text/html; charset=utf-8"
	case strings.HasSuffix(name, ".js"):
		return "text/javascript; charset=utf-8"
	case strings.HasSuffix(name, ".css"):
		return "text/css; charset=utf-8"
	case strings.HasSuffix(name, ".svg"):
		return "image/svg+xml"
	}
	return ""
}

// contentSecurityPolicy allows the page only its own script, style and API:
// no inline script, no other origin, no framing. Job bodies are shown as
// text, and this is the second line of defence if one ever were not.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// asset is one embedded file, ready to serve.
type asset struct {
	name        string
	contentType string
	etag        string
	content     []byte
}

// handler serves the embedded assets by their path under Prefix.
type handler struct {
	assets map[string]asset // by path, e.g. "/ui/app.js"; "/ui/" is index.html
}

// Handler returns the dashboard's handler: GET and HEAD of Prefix+"/" (the
// page), of the files it loads, and of IconPath. Mount it at Prefix,
// Prefix+"/" and IconPath.
// It needs no auth: the page holds no data, and asks the user for the API
// token when an API call answers 401.
func Handler() http.Handler {
	h := &handler{assets: make(map[string]asset)}
	err := fs.WalkDir(static, "static", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		content, err := static.ReadFile(path)
		if err != nil {
			return err
		}
		name := strings.TrimPrefix(path, "static/")
		ctype := contentType(name)
		if ctype == "" {
			return fmt.Errorf("embedded file %s has no known content type", name)
		}
		sum := sha256.Sum256(content)
		a := asset{name: name, contentType: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`, content: content}
		h.assets[Prefix+"/"+name] = a
		switch name {
		case "index.html":
			h.assets[Prefix+"/"] = a
		case "favicon.svg":
			h.assets[IconPath] = a
		}
		return nil
	})
	if err != nil {
		// The files are compiled in: this can only be a build mistake,
		// which the package's tests catch.
		panic(fmt.Sprintf("ui: read the embedded assets: %v", err))
	}
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method "+r.Method+" is not allowed on "+r.URL.Path+": use GET", http.StatusMethodNotAllowed)
		return
	}
	if r.URL.Path == Prefix {
		// Relative, so that it stays under a proxy's path prefix.
		w.Header().Set("Location", strings.TrimPrefix(Prefix, "/")+"/")
		w.WriteHeader(http.StatusMovedPermanently)
		return
	}
	a, ok := h.assets[r.URL.Path]
	if !ok || r.URL.Path == Prefix+"/index.html" {
		// index.html has one address, Prefix+"/", so that its relative
		// links resolve the same way everywhere.
		http.Error(w, "not found: the dashboard is at "+Prefix+"/", http.StatusNotFound)
		return
	}
	header := w.Header()
	header.Set("Content-Type", a.contentType)
	header.Set("X-Content-Type-Options", "nosniff")
	header.Set("Content-Security-Policy", contentSecurityPolicy)
	header.Set("Referrer-Policy", "no-referrer")
	header.Set("X-Frame-Options", "DENY")
	// Revalidate on every load (a cheap 304 by ETag), so that a new
	// server version's page is picked up at once.
	header.Set("Cache-Control", "no-cache")
	header.Set("ETag", a.etag)
	http.ServeContent(w, r, a.name, time.Time{}, bytes.NewReader(a.content))
}
