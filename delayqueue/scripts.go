package delayqueue

import (
	"embed"
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
// the functions the script never calls are left out. They
// are sent with EVALSHA, falling back to EVAL when Redis lost its script
// cache (a restart, SCRIPT FLUSH).
type scripts struct {
	push, claim, moveDue, finish, remove, unclaim, release, touch *redis.Script
	kick, deadDelete, deadSweep, get, signal, claimHook           *redis.Script
	// export and adopt move jobs between partitions (Repartition).
	export, adopt *redis.Script
	// The migrations touch several partitions' keys and the old layouts'
	// at once: they run on one Redis only (never a cluster), before the
	// engine starts, and are exempt from the key check.
	migrateV1, importV0 *redis.Script
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

// assemble returns a script's source: the lib sections its first line
// names, with those they need, in lib.lua's order, then the script.
func assemble(name, src string, lib []libSection) (string, error) {
	first, _, _ := strings.Cut(src, "\n")
	list, ok := strings.CutPrefix(first, "-- lib:")
	if !ok {
		return "", fmt.Errorf("scripts/%s: the first line must name the lib sections it uses (-- lib: ...)", name)
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
	var b strings.Builder
	for _, section := range lib {
		if !wanted[section.name] {
			continue
		}
		delete(wanted, section.name)
		b.WriteString(section.text)
		b.WriteString("\n")
	}
	for unknown := range wanted {
		return "", fmt.Errorf("scripts/%s: unknown lib section %q", name, unknown)
	}
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

// loadScripts reads the scripts; with checkKeys, the partition scripts
// start with scripts/check.lua, which fails a call touching a key it was
// not given or a key of another hash slot (tests).
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
	var s scripts
	for _, e := range []struct {
		dst    **redis.Script
		name   string
		exempt bool
	}{
		{&s.push, "push.lua", false},
		{&s.claim, "claim.lua", false},
		{&s.moveDue, "movedue.lua", false},
		{&s.finish, "finish.lua", false},
		{&s.remove, "delete.lua", false},
		{&s.unclaim, "unclaim.lua", false},
		{&s.release, "release.lua", false},
		{&s.touch, "touch.lua", false},
		{&s.kick, "kick.lua", false},
		{&s.deadDelete, "deaddelete.lua", false},
		{&s.deadSweep, "deadsweep.lua", false},
		{&s.get, "get.lua", false},
		{&s.signal, "signal.lua", false},
		{&s.claimHook, "claimhook.lua", false},
		{&s.export, "export.lua", false},
		{&s.adopt, "adopt.lua", false},
		{&s.migrateV1, "migratev1.lua", true},
		{&s.importV0, "importv0.lua", true},
	} {
		src, err := read(e.name)
		if err != nil {
			return scripts{}, err
		}
		if src, err = assemble(e.name, src, lib); err != nil {
			return scripts{}, err
		}
		if !e.exempt {
			src = prelude + "\n" + src
		}
		// A negative key count: each call says how many keys it passes.
		*e.dst = redis.NewScript(-1, src)
	}
	return s, nil
}

// partitionScripts are the scripts the running engine calls.
func (s scripts) partitionScripts() []*redis.Script {
	return []*redis.Script{s.push, s.claim, s.moveDue, s.finish, s.remove, s.unclaim, s.release, s.touch,
		s.kick, s.deadDelete, s.deadSweep, s.get, s.signal, s.claimHook}
}
