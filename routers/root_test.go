package routers

import (
	"net/http"
	"strings"
	"testing"

	"github.com/delay-queue/delay-queue/internal/redistest"
)

// GET / says what the server serves, and names the dashboard when there
// is one; other paths and methods stay as they were.
func TestRootNamesTheAPIAndTheDashboard(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})
	withUI := testOptions()
	withUI.UI, withUI.AuthToken = ui, testToken
	cases := []struct {
		name         string
		opts         Options
		method, path string
		status, code int
		has, hasNot  string
	}{
		{"with the dashboard", withUI, "GET", "/", 200, 0, "the dashboard is at /ui/", ""},
		{"without it", testOptions(), "GET", "/", 200, 0, "POST /push, /pop", "/ui/"},
		{"HEAD", withUI, "HEAD", "/", 200, -1, "", ""},
		{"POST /, as before", testOptions(), "POST", "/", 404, 1, "unknown path", ""},
		{"a path below it", testOptions(), "GET", "/nothing-here", 404, 1, "unknown path", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp := serve(t, New(&fakeQueue{}, c.opts, redistest.Logger(t)), c.method, c.path, "")
			if resp.status != c.status || (c.code >= 0 && resp.code != c.code) {
				t.Fatalf("%s %s = %d %s, want %d with code %d", c.method, c.path, resp.status, resp.raw, c.status, c.code)
			}
			if c.has != "" && !strings.Contains(resp.msg, c.has) {
				t.Errorf("message %q lacks %q", resp.msg, c.has)
			}
			if c.hasNot != "" && strings.Contains(resp.msg, c.hasNot) {
				t.Errorf("message %q has %q", resp.msg, c.hasNot)
			}
		})
	}
}
