package delayqueue

import (
	"regexp"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
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

func TestPruneUnusedFunctionsKeepsWhatCodeNames(t *testing.T) {
	t.Parallel()
	lib := `local function unused()
  return 1
end
local function helper()
  return 2
end
local function used_by_kept()
  return helper()
end
local function used_by_dropped()
  return 3
end
local function dropped_caller()
  return used_by_dropped()
end
local function recursive(n)
  if n > 0 then
    return recursive(n - 1)
  end
  return 0
end
-- only_in_comment is named here, and in a comment after code below
local function only_in_comment()
  return 4
end
local function in_string()
  return 5
end
local function nested()
  local function inner()
    return 6
  end
  return inner()
end
local T = {nested}
`
	body := `return used_by_kept() .. 'in_string' .. "--" .. #T -- only_in_comment()
`
	got, err := pruneUnusedFunctions("x.lua", lib+body)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		fn   string
		kept bool
	}{
		{"unused", false},
		{"helper", true},
		{"used_by_kept", true},
		{"used_by_dropped", false}, // its only caller is dropped
		{"dropped_caller", false},
		{"recursive", false}, // it names only itself
		{"only_in_comment", false},
		{"in_string", true}, // a string's word keeps it
		{"nested", true},    // named by a statement, not a call
	}
	for _, c := range cases {
		if kept := strings.Contains(got, "local function "+c.fn+"("); kept != c.kept {
			t.Errorf("function %s kept = %v, want %v, in:\n%s", c.fn, kept, c.kept, got)
		}
	}
	if !strings.HasSuffix(got, "local T = {nested}\n"+body) {
		t.Errorf("the statements and the body changed:\n%s", got)
	}
	if _, err := pruneUnusedFunctions("x.lua", "local function open()\n  return 1\n"); err == nil {
		t.Error("a function with no end line was accepted")
	}
}

// realLib is scripts/lib.lua, parsed.
func realLib(t *testing.T) []libSection {
	t.Helper()
	libText, err := scriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	lib, err := parseLib(string(libText))
	if err != nil {
		t.Fatal(err)
	}
	return lib
}

func TestEveryScriptCallsOnlyFunctionsItKeeps(t *testing.T) {
	t.Parallel()
	// The real scripts after pruning: every name a script's code calls as a
	// function is defined in it or is a Lua or Redis global.
	lib := realLib(t)
	names, err := scriptFiles.ReadDir("scripts")
	if err != nil {
		t.Fatal(err)
	}
	defined := regexp.MustCompile(`local function ([A-Za-z_][A-Za-z0-9_]*)`)
	for _, e := range names {
		if e.Name() == "lib.lua" || e.Name() == "check.lua" {
			continue
		}
		src, err := scriptFiles.ReadFile("scripts/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		full, err := assemble(e.Name(), string(src), lib)
		if err != nil {
			t.Fatal(err)
		}
		unpruned := full
		if first, _, _ := strings.Cut(string(src), "\n"); strings.HasPrefix(first, "-- lib:") {
			// the same sections, unpruned, for the names lib defines
			var b strings.Builder
			for _, s := range lib {
				b.WriteString(s.text)
			}
			unpruned = b.String()
		}
		kept := map[string]bool{}
		for _, m := range defined.FindAllStringSubmatch(full, -1) {
			kept[m[1]] = true
		}
		for _, m := range defined.FindAllStringSubmatch(unpruned, -1) {
			if kept[m[1]] {
				continue
			}
			for _, w := range luaCodeNames(full) {
				if w == m[1] {
					t.Errorf("%s: names %s, whose definition was pruned", e.Name(), w)
					break
				}
			}
		}
	}
}

func TestCheckTopLevelKeepsPerCallStateOutOfTheLibrary(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, section, err string
	}{
		{"declarations, constants and a begin function", `local A, B
local K = 'x', 5
local function begin_s()
  A, B = {}, 0
end
local L = -1
`, ""},
		{"a table at the top level", "local T = {}\n", "not a constant"},
		{"a computed value", "local N = tonumber(ARGV[1])\n", "not a constant"},
		{"a statement", "local A\nA = 1\nlocal function begin_s()\n  A = 1\nend\n", "not a declaration"},
		{"state no begin sets", "local A, B\nlocal function begin_s()\n  A = 1\nend\n", "does not set B"},
		{"state and no begin", "local A\n", "does not set A"},
		{"state after begin", "local function begin_s()\nend\nlocal A\n", "comes after begin_s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkTopLevel([]libSection{{name: "s", text: "-- section s\n" + c.section}})
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Errorf("checkTopLevel = %v, want an error with %q", err, c.err)
			}
		})
	}
	// The real lib follows the rule.
	lib := realLib(t)
	if err := checkTopLevel(lib); err != nil {
		t.Fatal(err)
	}
}

// The key check (check.lua) fails a script that touches a key it was not
// given, as a script of its own (miniredis, a real Redis) and as a
// function of a library (a real Redis), and lets one through that keeps
// to its keys.
func TestKeyCheckRefusesAnUndeclaredKey(t *testing.T) {
	t.Parallel()
	prelude, err := scriptFiles.ReadFile("scripts/check.lua")
	if err != nil {
		t.Fatal(err)
	}
	lib := realLib(t)
	bodies := map[string]string{
		"declared.lua":   "-- lib:\nreturn redis.call('GET', KEYS[1])\n",
		"undeclared.lua": "-- lib:\nreturn redis.call('GET', 'elsewhere')\n",
	}
	asScripts := map[string]*redis.Script{}
	var functions []libraryFunction
	dst := map[string]*script{}
	for file, body := range bodies {
		sections, err := sectionsFor(file, body, lib)
		if err != nil {
			t.Fatal(err)
		}
		full, err := assembleSections(file, body, sections)
		if err != nil {
			t.Fatal(err)
		}
		asScripts[file] = redis.NewScript(-1, string(prelude)+"\ncheck_keys()\n"+full)
		dst[file] = &script{}
		functions = append(functions, libraryFunction{file: file, sections: sections, body: body, dst: dst[file]})
	}
	library, err := buildLibrary(string(prelude), lib, functions)
	if err != nil {
		t.Fatal(err)
	}
	// The ARGV header every script expects: no wake-up topics.
	args := func(name string) []any {
		return []any{name, 10, "{p}1", "{p}2", "{p}3", "{p}4", "{p}5", "{p}6", "{p}7", "{p}8", "{p}9", "{p}10", 1, 1, 1, 0}
	}
	check := func(t *testing.T, run func(file string) (any, error)) {
		t.Helper()
		if _, err := run("declared.lua"); err != nil {
			t.Errorf("declared key: %v", err)
		}
		if _, err := run("undeclared.lua"); err == nil || !strings.Contains(err.Error(), "which is not in KEYS") {
			t.Errorf("undeclared key: %v, want the key check's error", err)
		}
	}
	redistest.ForEach(t, redistest.StandaloneBackends(), func(t *testing.T, r *redistest.Redis) {
		c, err := redis.Dial("tcp", r.Addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		t.Run("scripts", func(t *testing.T) {
			check(t, func(file string) (any, error) { return asScripts[file].Do(c, args(file)[1:]...) })
		})
		if _, err := c.Do("FUNCTION", "LOAD", library.code); redisconn.IsFunctionsRefusedReply(err) {
			return // miniredis has no functions
		} else if err != nil {
			t.Fatalf("FUNCTION LOAD: %v", err)
		}
		t.Run("functions", func(t *testing.T) {
			check(t, func(file string) (any, error) { return c.Do("FCALL", args(dst[file].function)...) })
			// Again: the library's state from the first calls does not
			// carry the keys over.
			check(t, func(file string) (any, error) { return c.Do("FCALL", args(dst[file].function)...) })
		})
	})
}
