package ui_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/routers"
	"github.com/delay-queue/delay-queue/ui"
)

// pathRecorder remembers the paths of the requests it passes on.
type pathRecorder struct {
	next  http.Handler
	mu    sync.Mutex
	paths []string
}

func (p *pathRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.paths = append(p.paths, r.URL.Path)
	p.mu.Unlock()
	p.next.ServeHTTP(w, r)
}

func (p *pathRecorder) seen() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.paths)
}

// A dashboard load asks for the page's own icon, not /favicon.ico (which
// the server answers too, see TestIconIsServedQuietly in routers).
func TestBrowserAsksForThePagesIcon(t *testing.T) {
	b := startBrowser(t)
	logger := slog.New(redistest.LogHandler(t, slog.LevelWarn))
	q := enginetest.Start(t, redistest.Mini(t).Addr(), 5*time.Second, logger)
	rec := &pathRecorder{next: routers.New(q, routers.Options{BlockTimeout: 5 * time.Second, UI: ui.Handler()}, logger)}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)

	b.open(srv.URL + "/ui/")
	b.waitUntil("the page loaded", `return document.readyState === 'complete';`)
	redistest.WaitFor(t, browserTimeout, "the browser to ask for an icon", func() bool {
		return slices.Contains(rec.seen(), "/ui/favicon.svg") || slices.Contains(rec.seen(), "/favicon.ico")
	})
	if slices.Contains(rec.seen(), "/favicon.ico") {
		t.Errorf("the browser asked for /favicon.ico: %v", rec.seen())
	}
}
