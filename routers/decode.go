package routers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delay-queue/delay-queue/wire"
)

// bodyBufferStart is the most a request body's buffer starts with: it
// grows as the bytes arrive, never past the length claimed. A client that
// claims max_body_bytes and sends little costs little; a body of up to
// this size, nearly every one, still takes a single allocation.
const bodyBufferStart = 16 << 10

// msgBodyTimeout answers a body that did not arrive within
// read_body_timeout; %s is the setting in seconds.
const msgBodyTimeout = "request body did not arrive within read_body_timeout (%s seconds)"

// readBody reads the whole request body through the max_body_bytes limit,
// within read_body_timeout. On failure it answers the request itself (413
// when the body is too large, 408 when it is too slow) and returns false.
func (h *handler) readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > h.opts.MaxBodyBytes {
		// Refused by its head, before a byte of it is read; the
		// connection closes, so the unread body is not taken for the
		// next request.
		w.Header().Set("Connection", "close")
		writeEnvelope(w, r, http.StatusRequestEntityTooLarge, wire.CodeFailure, msgBodyTooLarge(h.opts.MaxBodyBytes), nil)
		return nil, false
	}
	// net/http bounds the head (ReadHeaderTimeout) but not the body, and a
	// server-wide ReadTimeout would also cut held pops: net/http watches a
	// held request's connection by reading it, under the same deadline.
	// So the body gets a deadline of its own, lifted once it is in. (The
	// fast path has read the body before the handler runs, and its
	// writer takes the calls as no-ops.)
	deadline := http.NewResponseController(w)
	timed := h.opts.ReadBodyTimeout > 0
	if timed {
		_ = deadline.SetReadDeadline(time.Now().Add(h.opts.ReadBodyTimeout))
	}
	var body []byte
	var err error
	if r.ContentLength >= 0 {
		// The usual case: the length is known and allowed, and the server
		// stops the body there.
		body, err = readKnownLength(r.Body, r.ContentLength)
	} else {
		// No length (chunked): read through the limit, in a buffer that
		// grows from small as bytes arrive.
		var buf bytes.Buffer
		_, err = buf.ReadFrom(http.MaxBytesReader(w, r.Body, h.opts.MaxBodyBytes))
		body = buf.Bytes()
	}
	if err != nil {
		// The deadline stays: whatever net/http then reads of the rest of
		// the body fails at it too, and it closes the connection.
		var tooLarge *http.MaxBytesError
		switch {
		case errors.As(err, &tooLarge):
			writeEnvelope(w, r, http.StatusRequestEntityTooLarge, wire.CodeFailure, msgBodyTooLarge(tooLarge.Limit), nil)
		case timed && errors.Is(err, os.ErrDeadlineExceeded):
			seconds := strconv.FormatFloat(h.opts.ReadBodyTimeout.Seconds(), 'f', -1, 64)
			writeEnvelope(w, r, http.StatusRequestTimeout, wire.CodeFailure, fmt.Sprintf(msgBodyTimeout, seconds), nil)
		default:
			fail(w, r, "could not read the request body: "+err.Error())
		}
		return nil, false
	}
	if timed {
		_ = deadline.SetReadDeadline(time.Time{})
	}
	return body, true
}

// msgBodyTooLarge answers a body over max_body_bytes, limit.
func msgBodyTooLarge(limit int64) string {
	return "request body is larger than max_body_bytes (" + strconv.FormatInt(limit, 10) + " bytes)"
}

// readKnownLength reads a body of exactly n bytes. Its buffer starts at
// bodyBufferStart at most and doubles as the bytes arrive, up to n, unless
// the body says it is all in memory already (the fast path reads a body
// whole before the handler runs): then it takes one allocation of n.
func readKnownLength(r io.Reader, n int64) ([]byte, error) {
	size := min(n, bodyBufferStart)
	if inMemory, ok := r.(interface{ Len() int }); ok && int64(inMemory.Len()) >= n {
		size = n
	}
	body := make([]byte, 0, size)
	for int64(len(body)) < n {
		if len(body) == cap(body) {
			grown := make([]byte, len(body), min(n, 2*int64(cap(body))))
			copy(grown, body)
			body = grown
		}
		read, err := r.Read(body[len(body):cap(body)])
		body = body[:len(body)+read]
		switch {
		case err == io.EOF && int64(len(body)) < n:
			return nil, io.ErrUnexpectedEOF
		case err != nil && err != io.EOF:
			return nil, err
		}
	}
	return body, nil
}

// jsonObject holds the members of a request object that an endpoint knows,
// as raw JSON, keyed by their canonical (lower-case) names. Members whose
// value is null are left out: null means "not given".
type jsonObject map[string]json.RawMessage

// parseObject checks that body is exactly one JSON object and collects the
// members named in fields. Like encoding/json decoding into a struct (which
// the original server did), keys match field names case-insensitively and a
// repeated key overrides the earlier one; other members are ignored.
//
// The raw values are kept because encoding/json silently turns invalid
// UTF-8 and unpaired surrogate escapes into U+FFFD: the field accessors
// check the raw bytes first.
func parseObject(body []byte, fields ...string) (jsonObject, error) {
	if len(bytes.TrimLeft(body, " \t\r\n")) == 0 {
		return nil, errors.New("request body is empty: send a JSON object")
	}
	whole := bytes.TrimSpace(body)
	if !json.Valid(whole) {
		// Decode the first value for a precise syntax error, or find that
		// the first value was fine and something follows it.
		dec := json.NewDecoder(bytes.NewReader(body))
		var first json.RawMessage
		if err := dec.Decode(&first); err != nil {
			return nil, malformedJSON(err)
		}
		whole = first
		if whole[0] == '{' {
			return nil, errors.New("request body has data after the JSON object")
		}
	}
	if whole[0] != '{' {
		return nil, fmt.Errorf("request body must be a JSON object, got %s", jsonKind(whole))
	}

	// The object is valid JSON now: walk its members in order.
	return collectMembers(whole, fields)
}

// collectMembers walks the members of obj, a JSON object already known to
// be valid, and keeps those named in fields (see parseObject).
func collectMembers(obj []byte, fields []string) (jsonObject, error) {
	members := jsonObject{}
	err := forEachMember(obj, func(key []byte, value json.RawMessage) {
		for _, field := range fields {
			if !strings.EqualFold(string(key), field) {
				continue
			}
			if string(value) == "null" {
				delete(members, field)
			} else {
				members[field] = value
			}
		}
	})
	return members, err
}

// forEachMember calls fn with each key (unquoted) and raw value of obj, a
// valid JSON object, in order. It is a plain scanner, not a decoder: the
// bytes were validated before, so it only has to find where things end.
// The key is only valid during the call.
func forEachMember(obj []byte, fn func(key []byte, value json.RawMessage)) error {
	i := skipSpace(obj, 1) // past '{'
	for i < len(obj) && obj[i] != '}' {
		keyEnd := stringEnd(obj, i)
		rawKey := obj[i:keyEnd]
		key := rawKey[1 : len(rawKey)-1]
		if bytes.IndexByte(rawKey, '\\') >= 0 {
			var unescaped string
			if err := json.Unmarshal(rawKey, &unescaped); err != nil {
				return malformedJSON(err)
			}
			key = []byte(unescaped)
		}
		i = skipSpace(obj, keyEnd)
		i = skipSpace(obj, i+1) // past ':'
		valueEnd := valueEnd(obj, i)
		fn(key, obj[i:valueEnd])
		i = skipSpace(obj, valueEnd)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return nil
}

// forEachElement calls fn with each raw element of arr, a valid JSON array,
// in order (a plain scanner, like forEachMember).
func forEachElement(arr []byte, fn func(value json.RawMessage)) {
	i := skipSpace(arr, 1) // past '['
	for i < len(arr) && arr[i] != ']' {
		end := valueEnd(arr, i)
		fn(arr[i:end])
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string starting at b[i] ('"').
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// valueEnd returns the index just past the value starting at b[i].
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = stringEnd(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[j])) {
		j++
	}
	return j
}

func malformedJSON(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("request body is not valid JSON: it ends too early")
	}
	var syntax *json.SyntaxError
	if errors.As(err, &syntax) {
		return fmt.Errorf("request body is not valid JSON: %v (at byte %d)", syntax, syntax.Offset)
	}
	return fmt.Errorf("request body is not valid JSON: %v", err)
}

// jsonKind names the type of a raw JSON value, for error messages.
func jsonKind(raw []byte) string {
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// describeValue shows a rejected value in a message: numbers as written
// (shortened when huge), other types by kind.
func describeValue(raw []byte) string {
	if jsonKind(raw) != "a number" {
		return jsonKind(raw)
	}
	const maxShown = 40
	if len(raw) > maxShown {
		return string(raw[:maxShown]) + "…"
	}
	return string(raw)
}

// has reports whether the request gave the field a non-null value.
func (o jsonObject) has(field string) bool {
	_, ok := o[field]
	return ok
}

// stringField returns the field's string value ("" when absent). It rejects
// other JSON types, invalid UTF-8, and escapes of unpaired UTF-16 surrogates
// (such as "\ud800"), which do not encode any character.
func (o jsonObject) stringField(field string) (string, error) {
	raw, ok := o[field]
	if !ok {
		return "", nil
	}
	return stringValue(field, raw)
}

// stringValue decodes one raw JSON value that must be a string; name is
// what messages call it.
func stringValue(name string, raw json.RawMessage) (string, error) {
	if raw[0] != '"' {
		return "", fmt.Errorf("%s must be a string, got %s", name, jsonKind(raw))
	}
	if !utf8.Valid(raw) {
		return "", fmt.Errorf("%s must be valid UTF-8", name)
	}
	if hasUnpairedSurrogate(raw) {
		return "", fmt.Errorf("%s must be valid UTF-8: it has an escaped unpaired surrogate (\\ud800 to \\udfff)", name)
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		// No escapes: the literal's bytes are the value (the body was
		// validated as JSON, so it holds no control characters).
		return string(raw[1 : len(raw)-1]), nil
	}
	var value string
	if err := json.Unmarshal(raw, &value); err != nil {
		return "", fmt.Errorf("%s must be a string: %w", name, err)
	}
	return value, nil
}

// hasUnpairedSurrogate reports whether a raw JSON string literal contains a
// \u escape of a UTF-16 surrogate that is not part of a high-low pair.
// The literal is known to be valid JSON.
func hasUnpairedSurrogate(literal []byte) bool {
	for i := 0; i < len(literal); i++ {
		if literal[i] != '\\' {
			continue
		}
		if literal[i+1] != 'u' {
			i++ // skip the escaped character, which may be a backslash
			continue
		}
		unit := parseHex4(literal[i+2 : i+6])
		i += 5
		switch {
		case unit >= 0xDC00 && unit <= 0xDFFF:
			return true // a low surrogate with no high one before it
		case unit >= 0xD800 && unit <= 0xDBFF:
			rest := literal[i+1:]
			if len(rest) < 6 || rest[0] != '\\' || rest[1] != 'u' {
				return true
			}
			low := parseHex4(rest[2:6])
			if low < 0xDC00 || low > 0xDFFF {
				return true
			}
			i += 6
		}
	}
	return false
}

// parseHex4 decodes the four hex digits of a \u escape, or returns -1.
func parseHex4(digits []byte) int {
	if len(digits) != 4 {
		return -1
	}
	n, err := strconv.ParseUint(string(digits), 16, 16)
	if err != nil {
		return -1
	}
	return int(n)
}

// intField returns the field's integer value (0 when absent) and checks it
// lies in [min, max]. The number must be written as an integer: "10" is
// accepted, while "10.5", "10.0" and "1e3" are not, as in the original
// server (encoding/json refuses them for an int).
//
// unit, when not empty, is named in the message after the range.
func (o jsonObject) intField(field string, min, max int64, unit string) (int64, error) {
	raw, ok := o[field]
	if !ok {
		return 0, nil
	}
	return intValue(field, raw, min, max, unit)
}

// intValue decodes one raw JSON value that must be an integer in [min, max];
// name is what messages call it.
func intValue(name string, raw json.RawMessage, min, max int64, unit string) (int64, error) {
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if !isIntegerLiteral(raw) || err != nil || n < min || n > max {
		if unit != "" {
			unit = " (" + unit + ")"
		}
		return 0, fmt.Errorf("%s must be an integer between %d and %d%s, got %s",
			name, min, max, unit, describeValue(raw))
	}
	return n, nil
}

// boolField returns the field's boolean value (false when absent).
func (o jsonObject) boolField(field string) (bool, error) {
	raw, ok := o[field]
	if !ok {
		return false, nil
	}
	switch string(raw) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, fmt.Errorf("%s must be true or false, got %s", field, jsonKind(raw))
}

// arrayField returns the elements of an array field as raw JSON values (nil
// when absent) and checks their number lies in [minLen, maxLen]. elements
// names what the array holds, for messages ("integers", "ids").
func (o jsonObject) arrayField(field string, minLen, maxLen int, elements string) ([]json.RawMessage, error) {
	raw, ok := o[field]
	if !ok {
		return nil, nil
	}
	if raw[0] != '[' {
		return nil, fmt.Errorf("%s must be an array of %s, got %s", field, elements, jsonKind(raw))
	}
	// The value is valid JSON (see parseObject): its elements are found
	// by a plain scan, and keep their bytes as sent, so the UTF-8 checks
	// still see them.
	var values []json.RawMessage
	forEachElement(raw, func(value json.RawMessage) { values = append(values, value) })
	if len(values) < minLen || len(values) > maxLen {
		return nil, fmt.Errorf("%s must hold %d to %d %s, got %d", field, minLen, maxLen, elements, len(values))
	}
	return values, nil
}

// conflict returns an error when the request gave more than one of fields:
// they are alternatives. It names the fields in the order given.
func (o jsonObject) conflict(fields ...string) error {
	var given []string
	for _, field := range fields {
		if o.has(field) {
			given = append(given, field)
		}
	}
	if len(given) < 2 {
		return nil
	}
	return fmt.Errorf("give either %s, not both", strings.Join(given, " or "))
}

// isIntegerLiteral reports whether a raw JSON value is a number with neither
// a fraction nor an exponent.
func isIntegerLiteral(raw []byte) bool {
	digits := bytes.TrimPrefix(raw, []byte("-"))
	if len(digits) == 0 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
