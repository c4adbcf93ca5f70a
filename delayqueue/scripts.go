package delayqueue

import (
	"crypto/sha1"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/gomodule/redigo/redis"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts holds every state change of the engine, one Lua script each,
// each touching the keys of one partition only. A script is its file after
// the lib sections it names on its first line ("-- lib: ready dead"); the
// sections record and state come first in every one (scripts/lib.lua), and
// the functions the script never calls are left out.
//
// The partition scripts are also the functions of one library, which
// holds every section once: where Redis has functions (7 and later,
// Valkey), they are called with FCALL, and a call pays for the sections'
// functions only when the library is loaded, not on every call (37.7k of
// a one-job claim's Redis instructions, about 290k, as a script). Elsewhere (miniredis, Redis 6, an
// ACL user without FCALL) each is sent with EVALSHA, falling back to EVAL
// when Redis lost its script cache (a restart, SCRIPT FLUSH).
type scripts struct {
	push, claim, moveDue, finish, remove, unclaim, release, touch *script
	kick, deadDelete, deadSweep, get, signal, claimHook           *script
	// export and adopt move jobs between partitions (Repartition).
	export, adopt *script
	// The migrations touch several partitions' keys and the old layouts'
	// at once: they run on one Redis only (never a cluster), before the
	// engine starts, and are exempt from the key check.
	migrateV1, importV0 *script
	// lib holds the partition scripts as functions.
	lib library
}

// script is one state change: its function in the library ("" for the
// scripts outside it), and the same code as a script of its own.
type script struct {
	function string
	eval     *redis.Script
}

// library is the partition scripts as one Redis function library. Its
// name carries a hash of its code, so that servers of two releases (or
// with and without the key check) each find their own.
type library struct {
	name string
	code string // FUNCTION LOAD's argument
}

// load loads the library on c's Redis; one already there is fine.
func (l library) load(c redis.Conn) error {
	_, err := c.Do("FUNCTION", "LOAD", l.code)
	if err != nil && !isLibraryPresentReply(err) {
		return fmt.Errorf("load function library %s: %w", l.name, err)
	}
	return nil
}

// isLibraryPresentReply is FUNCTION LOAD's refusal of a library of that
// name that Redis holds already.
func isLibraryPresentReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply) && strings.HasPrefix(string(reply), "ERR Library ") && strings.HasSuffix(string(reply), " already exists")
}

// functionFlags are the flags the library declares for a script's
// function, which Redis honours for functions only (a script of its own is
// refused for lack of memory at its first write only, and then runs
// through). get.lua only reads. A full Redis (maxmemory, noeviction)
// refuses what adds jobs (push, and the moves between partitions) and runs
// the rest: the removals free memory, and the moves of a job between its
// states (due, claimed, released, lease ended, given back, kicked) and the
// wake-up tokens that go with them take about what they free. Without
// them consumers could not pop the jobs they must finish to free memory:
// a full Redis would stay full.
func functionFlags(file string) string {
	switch file {
	case "get.lua":
		return "'no-writes'"
	case "finish.lua", "delete.lua", "deaddelete.lua", "deadsweep.lua",
		"claim.lua", "claimhook.lua", "movedue.lua", "release.lua", "touch.lua", "unclaim.lua", "kick.lua", "signal.lua":
		return "'allow-oom'"
	}
	return ""
}

// libSection is a section of scripts/lib.lua: from its line "-- section
// <name>[, needs <names>]" to the next such line.
type libSection struct {
	name  string
	needs []string
	text  string
}

// parseLib splits lib.lua into its sections, in order. A section needs
// only sections before it.
func parseLib(lib string) ([]libSection, error) {
	var sections []libSection
	for _, line := range strings.SplitAfter(lib, "\n") {
		head, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "-- section ")
		if !ok {
			if len(sections) > 0 {
				sections[len(sections)-1].text += line
			}
			continue
		}
		name, needs, _ := strings.Cut(head, ", needs ")
		s := libSection{name: strings.TrimSpace(name), needs: strings.Fields(needs), text: line}
		for _, need := range s.needs {
			if !slices.ContainsFunc(sections, func(o libSection) bool { return o.name == need }) {
				return nil, fmt.Errorf("scripts/lib.lua: section %s needs %s, which does not come before it", s.name, need)
			}
		}
		sections = append(sections, s)
	}
	if len(sections) < 2 || sections[0].name != "record" || sections[1].name != "state" {
		return nil, fmt.Errorf("scripts/lib.lua: the first sections must be record and state")
	}
	return sections, nil
}

var (
	// luaDeclaration matches a top-level "local a, b" or "local A = 'x'".
	luaDeclaration = regexp.MustCompile(`^local ([A-Za-z_][A-Za-z0-9_]*(?:, [A-Za-z_][A-Za-z0-9_]*)*)(?: = (.*))?$`)
	// luaConstants matches a list of string and number literals.
	luaConstants = regexp.MustCompile(`^(?:'[^'\\]*'|-?[0-9]+)(?:, (?:'[^'\\]*'|-?[0-9]+))*$`)
)

// checkTopLevel checks lib.lua's rule for the top level of each section:
// declarations only (functions, constants, and per-call state with no
// value), and every per-call name set by the section's begin function,
// defined after them. A library runs its top level once, at load, and
// keeps its values from one call to the next: a table or a computed value
// there would leak from a call into the next.
func checkTopLevel(lib []libSection) error {
	for _, section := range lib {
		var state []string
		begin := ""
		text := section.text
		for at := 0; at < len(text); {
			line, _, _ := strings.Cut(text[at:], "\n")
			if rest, ok := strings.CutPrefix(line, "local function "); ok {
				end := strings.Index(text[at:], "\nend\n")
				if end < 0 {
					return fmt.Errorf("scripts/lib.lua, section %s: function %s has no \"end\" line", section.name, rest)
				}
				if strings.HasPrefix(rest, "begin_"+section.name+"(") {
					begin = text[at : at+end]
				}
				at += end + len("\nend\n")
				continue
			}
			at += len(line) + 1
			if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "--") {
				continue
			}
			m := luaDeclaration.FindStringSubmatch(line)
			switch {
			case m == nil:
				return fmt.Errorf("scripts/lib.lua, section %s: %q at the top level is not a declaration", section.name, line)
			case m[2] != "" && !luaConstants.MatchString(m[2]):
				return fmt.Errorf("scripts/lib.lua, section %s: %q gives a top-level name a value that is not a constant: leave it without one and set it in begin_%s", section.name, line, section.name)
			case m[2] == "":
				if begin != "" {
					return fmt.Errorf("scripts/lib.lua, section %s: %q comes after begin_%s", section.name, line, section.name)
				}
				state = append(state, strings.Split(m[1], ", ")...)
			}
		}
		for _, name := range state {
			if !slices.Contains(luaCodeNames(begin), name) {
				return fmt.Errorf("scripts/lib.lua, section %s: begin_%s does not set %s", section.name, section.name, name)
			}
		}
	}
	return nil
}

// sectionsFor returns the lib sections a script's first line names, with
// those they need, in lib.lua's order.
func sectionsFor(name, src string, lib []libSection) ([]libSection, error) {
	first, _, _ := strings.Cut(src, "\n")
	list, ok := strings.CutPrefix(first, "-- lib:")
	if !ok {
		return nil, fmt.Errorf("scripts/%s: the first line must name the lib sections it uses (-- lib: ...)", name)
	}
	wanted := map[string]bool{"record": true, "state": true}
	for _, section := range strings.Fields(list) {
		wanted[section] = true
	}
	// Needs point earlier in lib: one pass from the end closes them.
	for i := len(lib) - 1; i >= 0; i-- {
		if wanted[lib[i].name] {
			for _, need := range lib[i].needs {
				wanted[need] = true
			}
		}
	}
	var sections []libSection
	for _, section := range lib {
		if wanted[section.name] {
			delete(wanted, section.name)
			sections = append(sections, section)
		}
	}
	for unknown := range wanted {
		return nil, fmt.Errorf("scripts/%s: unknown lib section %q", name, unknown)
	}
	return sections, nil
}

// beginCalls is the code a call runs before the script: each section's
// begin function, which sets its per-call state (see lib.lua).
func beginCalls(sections []libSection) string {
	var b strings.Builder
	for _, s := range sections {
		if strings.Contains(s.text, "\nlocal function begin_"+s.name+"()\n") {
			b.WriteString("begin_" + s.name + "()\n")
		}
	}
	return b.String()
}

// assemble returns a script's source as a script of its own: the lib
// sections its first line names, with those they need, in lib.lua's
// order, the calls of their begin functions, then the script.
func assemble(name, src string, lib []libSection) (string, error) {
	sections, err := sectionsFor(name, src, lib)
	if err != nil {
		return "", err
	}
	return assembleSections(name, src, sections)
}

// assembleSections is assemble with the script's sections found.
func assembleSections(name, src string, sections []libSection) (string, error) {
	var b strings.Builder
	for _, section := range sections {
		b.WriteString(section.text)
		b.WriteString("\n")
	}
	b.WriteString(beginCalls(sections))
	b.WriteString(src)
	return pruneUnusedFunctions(name, b.String())
}

// luaName matches a Lua identifier.
var luaName = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*`)

// luaCodeNames returns the identifiers of Lua code, comments left out (a
// string's words are kept: a name in a string only keeps a function).
func luaCodeNames(code string) []string {
	var b strings.Builder
	quote := byte(0)
	for i := 0; i < len(code); i++ {
		c := code[i]
		switch {
		case quote != 0:
			if c == '\\' {
				i++
			} else if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && strings.HasPrefix(code[i:], "--"):
			end := strings.IndexByte(code[i:], '\n')
			if end < 0 {
				i = len(code)
			} else {
				i += end
			}
			c = '\n'
		}
		b.WriteByte(c)
	}
	return luaName.FindAllString(b.String(), -1)
}

// pruneUnusedFunctions drops the top-level functions ("local function f"
// at the start of a line, to the first "end" line) that no code left in
// the script names, until none is left. Lua makes every function of a
// script anew on each call, so a function the script never calls costs
// every call, and the sections hold more than most scripts use.
func pruneUnusedFunctions(name, src string) (string, error) {
	type block struct {
		name       string
		start, end int // src[start:end], its lines
		names      []string
		dropped    bool
	}
	var blocks []*block
	uses := map[string]int{}
	for _, w := range luaCodeNames(src) {
		uses[w]++
	}
	for at := 0; at < len(src); {
		line, _, _ := strings.Cut(src[at:], "\n")
		if rest, ok := strings.CutPrefix(line, "local function "); ok {
			fn, _, _ := strings.Cut(rest, "(")
			end := strings.Index(src[at:], "\nend\n")
			if end < 0 {
				return "", fmt.Errorf("scripts/%s: function %s has no \"end\" line", name, fn)
			}
			b := &block{name: fn, start: at, end: at + end + len("\nend\n")}
			b.names = luaCodeNames(src[b.start:b.end])
			blocks = append(blocks, b)
			at = b.end
			continue
		}
		at += len(line) + 1
	}
	for dropped := true; dropped; {
		dropped = false
		for _, b := range blocks {
			if b.dropped {
				continue
			}
			own := 0
			for _, w := range b.names {
				if w == b.name {
					own++
				}
			}
			if uses[b.name] > own {
				continue
			}
			b.dropped, dropped = true, true
			for _, w := range b.names {
				uses[w]--
			}
		}
	}
	var out strings.Builder
	at := 0
	for _, b := range blocks {
		if b.dropped {
			out.WriteString(src[at:b.start])
			at = b.end
		}
	}
	out.WriteString(src[at:])
	return out.String(), nil
}

// loadScripts reads the scripts and builds the library; with checkKeys,
// the partition scripts start with scripts/check.lua, which fails a call
// touching a key it was not given or a key of another hash slot (tests).
func loadScripts(checkKeys bool) (scripts, error) {
	read := func(name string) (string, error) {
		b, err := scriptFiles.ReadFile("scripts/" + name)
		if err != nil {
			return "", fmt.Errorf("read scripts/%s: %w", name, err)
		}
		return string(b), nil
	}
	prelude := ""
	if checkKeys {
		var err error
		if prelude, err = read("check.lua"); err != nil {
			return scripts{}, err
		}
	}
	libText, err := read("lib.lua")
	if err != nil {
		return scripts{}, err
	}
	lib, err := parseLib(libText)
	if err != nil {
		return scripts{}, err
	}
	if err := checkTopLevel(lib); err != nil {
		return scripts{}, err
	}
	var s scripts
	var functions []libraryFunction
	for _, e := range []struct {
		dst      **script
		file     string
		exempt   bool // from the key check
		function bool // in the library
	}{
		{&s.push, "push.lua", false, true},
		{&s.claim, "claim.lua", false, true},
		{&s.moveDue, "movedue.lua", false, true},
		{&s.finish, "finish.lua", false, true},
		{&s.remove, "delete.lua", false, true},
		{&s.unclaim, "unclaim.lua", false, true},
		{&s.release, "release.lua", false, true},
		{&s.touch, "touch.lua", false, true},
		{&s.kick, "kick.lua", false, true},
		{&s.deadDelete, "deaddelete.lua", false, true},
		{&s.deadSweep, "deadsweep.lua", false, true},
		{&s.get, "get.lua", false, true},
		{&s.signal, "signal.lua", false, true},
		{&s.claimHook, "claimhook.lua", false, true},
		{&s.export, "export.lua", false, false},
		{&s.adopt, "adopt.lua", false, false},
		{&s.migrateV1, "migratev1.lua", true, false},
		{&s.importV0, "importv0.lua", true, false},
	} {
		src, err := read(e.file)
		if err != nil {
			return scripts{}, err
		}
		sections, err := sectionsFor(e.file, src, lib)
		if err != nil {
			return scripts{}, err
		}
		full, err := assembleSections(e.file, src, sections)
		if err != nil {
			return scripts{}, err
		}
		if !e.exempt && prelude != "" {
			full = prelude + "\ncheck_keys()\n" + full
		}
		// A negative key count: each call says how many keys it passes.
		*e.dst = &script{eval: redis.NewScript(-1, full)}
		if e.function {
			functions = append(functions, libraryFunction{file: e.file, sections: sections, body: src, dst: *e.dst})
		}
	}
	if s.lib, err = buildLibrary(prelude, lib, functions); err != nil {
		return scripts{}, err
	}
	return s, nil
}

// libraryFunction is a script as a function of the library.
type libraryFunction struct {
	file     string
	sections []libSection // those it names, with their needs
	body     string
	dst      *script // its function's name is set here
}

// libraryPlaceholder stands for the library's name until its code is
// hashed.
const libraryPlaceholder = "@library@"

// buildLibrary returns the library of functions: every section any of
// them names, once, then each script in a function that sets KEYS and ARGV
// and runs the begin functions of its sections (and the key check, with a
// prelude), named <library>_<script>. Functions no script calls are left
// out. It sets each script's function name.
func buildLibrary(prelude string, lib []libSection, functions []libraryFunction) (library, error) {
	used := map[string]bool{}
	for _, f := range functions {
		for _, s := range f.sections {
			used[s.name] = true
		}
	}
	var b strings.Builder
	b.WriteString("#!lua name=" + libraryPlaceholder + "\n")
	// Load-time names: at load, redis is the registering API, not the one
	// calls use.
	b.WriteString("local register = redis.register_function\nlocal KEYS, ARGV\n")
	if prelude != "" {
		b.WriteString(prelude + "\n")
	}
	for _, s := range lib {
		if used[s.name] {
			b.WriteString(s.text + "\n")
		}
	}
	for _, f := range functions {
		name := libraryPlaceholder + "_" + strings.TrimSuffix(f.file, ".lua")
		fmt.Fprintf(&b, "register{function_name = '%s', flags = {%s}, callback = function(keys, args)\nKEYS, ARGV = keys, args\n", name, functionFlags(f.file))
		if prelude != "" {
			b.WriteString("check_keys()\n")
		}
		b.WriteString(beginCalls(f.sections))
		b.WriteString(f.body)
		b.WriteString("end}\n")
	}
	code, err := pruneUnusedFunctions("library", b.String())
	if err != nil {
		return library{}, err
	}
	sum := sha1.Sum([]byte(code))
	l := library{name: "delayqueue_" + hex.EncodeToString(sum[:8])}
	l.code = strings.ReplaceAll(code, libraryPlaceholder, l.name)
	for _, f := range functions {
		f.dst.function = l.name + "_" + strings.TrimSuffix(f.file, ".lua")
	}
	return l, nil
}

// partitionScripts are the scripts the running engine calls.
func (s scripts) partitionScripts() []*script {
	return []*script{s.push, s.claim, s.moveDue, s.finish, s.remove, s.unclaim, s.release, s.touch,
		s.kick, s.deadDelete, s.deadSweep, s.get, s.signal, s.claimHook}
}
