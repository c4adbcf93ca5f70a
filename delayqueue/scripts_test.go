package delayqueue

import (
	"strings"
	"testing"
)

func TestAssembleTakesTheNamedSectionsAndTheirNeeds(t *testing.T) {
	t.Parallel()
	lib, err := parseLib(`-- header, before any section
-- section record
R
-- section state, needs record
S
-- section ready, needs state
Y
-- section dead, needs state
D
-- section retry, needs ready dead
T
`)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, first, want, err string
	}{
		{"record and state always", "-- lib:", "RS", ""},
		{"a section with its needs, in the file's order", "-- lib: retry", "RSYDT", ""},
		{"named twice, or out of order", "-- lib: dead ready dead", "RSYD", ""},
		{"an unknown section", "-- lib: nope", "", `unknown lib section "nope"`},
		{"no lib line", "-- push.lua: ...", "", "must name the lib sections"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := assemble("x.lua", c.first+"\nBODY\n", lib)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("assemble = %v, want an error with %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var letters strings.Builder
			for _, line := range strings.Split(got, "\n") {
				if len(line) == 1 {
					letters.WriteString(line)
				}
			}
			if letters.String() != c.want || !strings.HasSuffix(got, c.first+"\nBODY\n") {
				t.Errorf("assembled sections %q, want %q then the script:\n%s", letters.String(), c.want, got)
			}
		})
	}
}

func TestParseLibRefusesANeedNotBeforeIt(t *testing.T) {
	t.Parallel()
	for _, lib := range []string{
		"-- section record\n-- section state, needs record, later\n",
		"-- section record\n-- section state, needs ready\n-- section ready\n",
		"-- section state\n-- section record\n",
	} {
		if _, err := parseLib(lib); err == nil {
			t.Errorf("parseLib accepted %q", lib)
		}
	}
	// The real file parses, and every script assembles.
	if _, err := loadScripts(true); err != nil {
		t.Fatal(err)
	}
}
