package routers

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkHandler measures the HTTP layer alone (decoding, validation,
// envelope), with a fake queue.
func BenchmarkHandler(b *testing.B) {
	bodies := map[string]string{
		"push-small":    `{"topic":"order","id":"15702","delay":3600,"ttr":120,"body":"{\"uid\":10829378,\"created\":1498657365}"}`,
		"push-64KiB":    `{"topic":"order","id":"15702","delay":3600,"ttr":120,"body":"` + strings.Repeat("x", 64<<10) + `"}`,
		"pop":           `{"topic":"order,mail","timeout":0}`,
		"push-batch100": batchBody(100),
	}
	h := New(&fakeQueue{}, Options{}, slog.New(slog.DiscardHandler))
	for name, body := range bodies {
		path := "/" + strings.SplitN(name, "-", 2)[0]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("POST", path, strings.NewReader(body)))
				if rec.Code != 200 || !strings.HasPrefix(rec.Body.String(), `{"code":0,`) {
					b.Fatalf("status %d: %s", rec.Code, rec.Body)
				}
			}
		})
	}
}

// batchBody is a /push body with n distinct jobs.
func batchBody(n int) string {
	jobs := make([]string, n)
	for i := range jobs {
		jobs[i] = fmt.Sprintf(`{"topic":"order","id":"%d","ttr":120,"retry":[60,600],"body":"{\"uid\":10829378}"}`, 15702+i)
	}
	return `{"jobs":[` + strings.Join(jobs, ",") + `]}`
}
