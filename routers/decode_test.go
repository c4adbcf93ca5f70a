package routers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
)

// TestForEachMemberMatchesTheDecoder checks the plain member scanner
// against encoding/json's decoder on valid objects with tricky spelling.
func TestForEachMemberMatchesTheDecoder(t *testing.T) {
	for _, obj := range []string{
		`{}`,
		` { } `,
		`{"a":1}`,
		`{ "a" : 1 , "b" : "x" }`,
		"{\n\t\"a\"\r\n:\t-1.5e3\n}",
		`{"a":"}{][,\"","b":[1,{"c":"]"}],"c":{"d":{"e":[]}}}`,
		`{"k\"ey":true,"\u0074opic":null,"x\\":false}`,
		`{"a":"\\","b":"\\\"","c":"\u00e9\ud83d\ude00"}`,
		`{"a":1,"a":2,"A":3}`,
		`{"nested":[[[]],[{}],"[",{"]":"}"}],"n":0}`,
	} {
		type member struct{ Key, Value string }
		var want []member
		dec := json.NewDecoder(bytes.NewReader([]byte(obj)))
		dec.Token()
		for dec.More() {
			k, _ := dec.Token()
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Fatalf("%s: decoder: %v", obj, err)
			}
			want = append(want, member{k.(string), string(v)})
		}
		var got []member
		trimmed := bytes.TrimSpace([]byte(obj))
		if err := forEachMember(trimmed, func(k []byte, v json.RawMessage) { got = append(got, member{string(k), string(v)}) }); err != nil {
			t.Fatalf("%s: %v", obj, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n got %v\nwant %v", obj, got, want)
		}
	}
}

// TestForEachElementMatchesTheDecoder checks the plain element scanner
// against encoding/json on valid arrays with tricky spelling.
func TestForEachElementMatchesTheDecoder(t *testing.T) {
	for _, arr := range []string{
		`[]`, `[ ]`, `[1]`, ` [ 1 , "a" , null ] `, "[\n\t-1.5e3\r\n,true]",
		`["],[\"",{"a":[1,"]"]},[[],[{}]],"\\"]`,
		`[{"topic":"t","id":"1","ttr":5},{"topic":"t","id":"2","ttr":1,"retry":[0]}]`,
	} {
		var want []json.RawMessage
		if err := json.Unmarshal([]byte(arr), &want); err != nil {
			t.Fatalf("%s: %v", arr, err)
		}
		var got []json.RawMessage
		forEachElement(bytes.TrimSpace([]byte(arr)), func(v json.RawMessage) { got = append(got, v) })
		if fmt.Sprintf("%s", got) != fmt.Sprintf("%s", want) {
			t.Errorf("%s:\n got %s\nwant %s", arr, got, want)
		}
	}
}

// stringValue takes the literal's bytes as they are when there is no
// escape, and decodes escapes like encoding/json otherwise.
func TestStringValueMatchesTheDecoder(t *testing.T) {
	for _, literal := range []string{
		`""`, `"plain"`, `"a/b <&> é 😀"`, `"\/"`, `"\"q\""`, `"a\\b"`, `"\n\t\r\b\f"`,
		`"\u0041\u00e9\ud83d\ude00"`, `"tail\\"`, `"\u0000"`,
	} {
		var want string
		if err := json.Unmarshal([]byte(literal), &want); err != nil {
			t.Fatalf("%s: %v", literal, err)
		}
		got, err := stringValue("v", json.RawMessage(literal))
		if err != nil || got != want {
			t.Errorf("stringValue(%s) = %q, %v; want %q", literal, got, err, want)
		}
	}
}
