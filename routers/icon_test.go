package routers

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// The icon browsers ask for on their own is the UI's to answer, open and
// logged at debug: a dashboard load leaves no info line for it, let alone
// a 404 listing the endpoints.
func TestIconIsServedQuietly(t *testing.T) {
	t.Parallel()
	icon := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		io.WriteString(w, "<svg/>")
	})
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	opts := testOptions()
	opts.UI, opts.AuthToken = icon, testToken
	h := New(&fakeQueue{}, opts, logger)

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		rec := record(h, newRequest(t, method, "/favicon.ico", ""))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "image/svg+xml" {
			t.Errorf("%s /favicon.ico: %d %q %q, want the UI's icon", method, rec.Code, rec.Header().Get("Content-Type"), rec.Body.String())
		}
	}
	if text := logs.String(); text != "" {
		t.Errorf("the icon was logged at info:\n%s", text)
	}

	// Without a UI there is no icon: an unknown path, as before.
	if resp := serve(t, New(&fakeQueue{}, testOptions(), redistest.Logger(t)), "GET", "/favicon.ico", ""); resp.status != http.StatusNotFound ||
		!strings.Contains(resp.msg, "unknown path") {
		t.Errorf("GET /favicon.ico without a UI: %d %s", resp.status, resp.raw)
	}
}
