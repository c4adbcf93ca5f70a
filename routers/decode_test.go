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
		if err := forEachMember(trimmed, func(k string, v json.RawMessage) { got = append(got, member{k, string(v)}) }); err != nil {
			t.Fatalf("%s: %v", obj, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s:\n got %v\nwant %v", obj, got, want)
		}
	}
}
