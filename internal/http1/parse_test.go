package http1

import (
	"bufio"
	"bytes"
	"maps"
	"net/http"
	"slices"
	"testing"
)

// FuzzParseHeadAgreesWithNetHTTP checks every head parseHead takes against
// net/http's own parser: the same method, path, host, length, keep-alive
// and headers, and never a head net/http would refuse. (go test runs the
// seeds; go test -fuzz FuzzParseHead explores.)
func FuzzParseHeadAgreesWithNetHTTP(f *testing.F) {
	for _, seed := range []string{
		"POST /push HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}",
		"POST /pop HTTP/1.1\r\nhost: 127.0.0.1:9277\r\ncontent-length: 0\r\nConnection: close\r\n\r\n",
		"POST /push HTTP/1.1\nHost: a\nX-Y:  v \t\nAuthorization: Bearer t\n\n",
		"POST /push HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\nAccept: */*\r\nAccept: text/plain\r\n\r\n",
		"POST /push HTTP/1.1\r\nHost: [::1]:80\r\nX-Empty:\r\nuser-agent: python-requests/2.31\r\n\r\n",
		"POST /push?x HTTP/1.1\r\nHost: a\r\n\r\n",
		"POST /push HTTP/1.1\r\nHost: a\r\nContent-Length: 01\r\n\r\n{",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		n := endOfHead(raw)
		if n == 0 {
			return
		}
		c := &conn{srv: &Server{Paths: map[string]bool{"/push": false, "/pop": true}, MaxBody: 1 << 20}}
		req, ok := c.parseHead(raw[:n])
		if !ok {
			return
		}
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			t.Fatalf("taken here, refused by net/http (%v): %q", err, raw[:n])
		}
		if r.Method != http.MethodPost || r.URL.Path != req.path || r.URL.RawQuery != "" || r.Host != req.host ||
			r.ContentLength != req.length || r.Close != req.close || r.ProtoMinor != 1 {
			t.Fatalf("%q: net/http read %s %s?%s host %q length %d close %v, here %s host %q length %d close %v",
				raw[:n], r.Method, r.URL.Path, r.URL.RawQuery, r.Host, r.ContentLength, r.Close,
				req.path, req.host, req.length, req.close)
		}
		if !maps.EqualFunc(r.Header, req.header, slices.Equal) {
			t.Fatalf("%q: headers %q here, %q in net/http", raw[:n], req.header, r.Header)
		}
	})
}
