package routers

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// An answer without data is written by hand when its message needs no
// escaping; it must be byte for byte what the JSON encoder writes, and any
// other message must still come out as valid, exact JSON.
func TestEnvelopeWithoutDataMatchesEncoder(t *testing.T) {
	tests := []struct {
		name    string
		code    int
		message string
		plain   bool
	}{
		{"success", codeSuccess, "pushed", true},
		{"failure", codeFailure, "job not found", true},
		{"empty message", codeSuccess, "", true},
		{"punctuation", codeFailure, "id is required (1-128 bytes: a-z, A-Z, 0-9, _-.:)", true},
		{"html characters", codeFailure, "a < b & c > d", true},
		{"quote", codeFailure, `unknown field "x"`, false},
		{"backslash", codeFailure, `path a\b`, false},
		{"newline", codeFailure, "two\nlines", false},
		{"utf-8", codeSuccess, "操作成功", false},
		{"line separator", codeFailure, "a\u2028b", false},
		{"invalid utf-8", codeFailure, "a\xffb", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isPlainJSONText(tt.message); got != tt.plain {
				t.Errorf("isPlainJSONText(%q) = %v, want %v", tt.message, got, tt.plain)
			}
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(envelope{Code: tt.code, Message: tt.message}); err != nil {
				t.Fatal(err)
			}
			w := httptest.NewRecorder()
			writeEnvelope(w, httptest.NewRequest(http.MethodPost, "/push", nil), http.StatusOK, tt.code, tt.message, nil)
			if got := w.Body.String(); got != want.String() {
				t.Errorf("answer %q, want the encoder's %q", got, want.String())
			}
			if got, want := w.Header().Get("Content-Length"), len(want.Bytes()); got != strconv.Itoa(want) {
				t.Errorf("Content-Length %s, want %d", got, want)
			}
		})
	}
}
