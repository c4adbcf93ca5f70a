package routers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/delay-queue/delay-queue/wire"
)

// An answer without data, or with a delivery, is written by hand when its
// text needs no escaping; it must be byte for byte what the JSON encoder
// writes, and any other answer must still come out as the encoder's.
func TestPlainEnvelopesMatchEncoder(t *testing.T) {
	t.Parallel()
	job := wire.Delivery{ID: "p0000000000001", Body: "bbbb", Topic: "orders", TTR: 30, Attempts: 1}
	withBody := func(body string) wire.Delivery {
		j := job
		j.Body = body
		return j
	}
	tests := []struct {
		name    string
		code    int
		message string
		plain   bool
		data    any
	}{
		{"success", wire.CodeSuccess, "pushed", true, nil},
		{"failure", wire.CodeFailure, "job not found", true, nil},
		{"empty message", wire.CodeSuccess, "", true, nil},
		{"punctuation", wire.CodeFailure, "id is required (1-128 bytes: a-z, A-Z, 0-9, _-.:)", true, nil},
		{"html characters", wire.CodeFailure, "a < b & c > d", true, nil},
		{"quote", wire.CodeFailure, `unknown field "x"`, false, nil},
		{"backslash", wire.CodeFailure, `path a\b`, false, nil},
		{"newline", wire.CodeFailure, "two\nlines", false, nil},
		{"utf-8", wire.CodeSuccess, "操作成功", false, nil},
		{"line separator", wire.CodeFailure, "a\u2028b", false, nil},
		{"invalid utf-8", wire.CodeFailure, "a\xffb", false, nil},
		{"delivery", wire.CodeSuccess, "ok", true, job},
		{"delivery, html body", wire.CodeSuccess, "ok", true, withBody(`<a href=x>&</a>`)},
		{"delivery, JSON body", wire.CodeSuccess, "ok", true, withBody(`{"order":"42"}`)},
		{"delivery, unicode body", wire.CodeSuccess, "ok", true, withBody("é\u2028")},
		{"delivery, control characters", wire.CodeSuccess, "ok", true, withBody("a\tb\x00")},
		{"delivery, empty body", wire.CodeSuccess, "ok", true, withBody("")},
		{"deliveries", wire.CodeSuccess, "2 jobs", true, []wire.Delivery{job, job}},
		{"no deliveries", wire.CodeSuccess, "no job ready", true, []wire.Delivery(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isPlainJSONText(tt.message); got != tt.plain {
				t.Errorf("isPlainJSONText(%q) = %v, want %v", tt.message, got, tt.plain)
			}
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(wire.Envelope[any]{Code: tt.code, Message: tt.message, Data: tt.data}); err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			writeEnvelope(w, httptest.NewRequest(http.MethodPost, "/push", nil), http.StatusOK, tt.code, tt.message, tt.data)
			if got := w.Body.String(); got != want.String() {
				t.Errorf("answer %q, want the encoder's %q", got, want.String())
			}
			if got, want := w.Header().Get("Content-Length"), len(want.Bytes()); got != strconv.Itoa(want) {
				t.Errorf("Content-Length %s, want %d", got, want)
			}
		})
	}
}
