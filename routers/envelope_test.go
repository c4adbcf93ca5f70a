package routers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// An answer without data, or with a delivery, is written by hand when its
// text needs no escaping; it must be byte for byte what the JSON encoder
// writes, and any other answer must still come out as the encoder's.
func TestPlainEnvelopesMatchEncoder(t *testing.T) {
	t.Parallel()
	job := deliveryView{ID: "p0000000000001", Body: "bbbb", Topic: "orders", TTR: 30, Attempts: 1}
	withBody := func(body string) deliveryView {
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
		{"success", codeSuccess, "pushed", true, nil},
		{"failure", codeFailure, "job not found", true, nil},
		{"empty message", codeSuccess, "", true, nil},
		{"punctuation", codeFailure, "id is required (1-128 bytes: a-z, A-Z, 0-9, _-.:)", true, nil},
		{"html characters", codeFailure, "a < b & c > d", true, nil},
		{"quote", codeFailure, `unknown field "x"`, false, nil},
		{"backslash", codeFailure, `path a\b`, false, nil},
		{"newline", codeFailure, "two\nlines", false, nil},
		{"utf-8", codeSuccess, "操作成功", false, nil},
		{"line separator", codeFailure, "a\u2028b", false, nil},
		{"invalid utf-8", codeFailure, "a\xffb", false, nil},
		{"delivery", codeSuccess, "ok", true, job},
		{"delivery, html body", codeSuccess, "ok", true, withBody(`<a href=x>&</a>`)},
		{"delivery, JSON body", codeSuccess, "ok", true, withBody(`{"order":"42"}`)},
		{"delivery, unicode body", codeSuccess, "ok", true, withBody("é\u2028")},
		{"delivery, control characters", codeSuccess, "ok", true, withBody("a\tb\x00")},
		{"delivery, empty body", codeSuccess, "ok", true, withBody("")},
		{"deliveries", codeSuccess, "2 jobs", true, []deliveryView{job, job}},
		{"no deliveries", codeSuccess, "no job ready", true, []deliveryView(nil)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isPlainJSONText(tt.message); got != tt.plain {
				t.Errorf("isPlainJSONText(%q) = %v, want %v", tt.message, got, tt.plain)
			}
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(envelope{Code: tt.code, Message: tt.message, Data: tt.data}); err != nil {
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
