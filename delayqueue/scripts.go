package delayqueue

import (
	"embed"
	"fmt"
	"strings"

	"github.com/gomodule/redigo/redis"
)

//go:embed scripts/*.lua scripts/lib/*.lua
var scriptFiles embed.FS

// scripts holds every state change of the engine, one Lua script each,
// each touching the keys of one partition only. A script is its file after
// the lib sections it names on its first line ("-- lib: ready dead"); the
// sections record and state come first in every one (scripts/lib/). They
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

// libSections are the lib sections in the order a script gets them, each
// with the sections it needs.
var libSections = []struct {
	name  string
	needs []string
}{
	{"record", nil},
	{"state", []string{"record"}},
	{"ready", []string{"state"}},
	{"dead", []string{"state"}},
	{"retry", []string{"ready", "dead"}},
	{"held", []string{"state"}},
	{"remove", []string{"state"}},
	{"view", []string{"state"}},
}

// assemble returns a script's source: the lib sections its first line
// names, with those they need, in libSections' order, then the script.
func assemble(name, src string, read func(string) (string, error)) (string, error) {
	first, _, _ := strings.Cut(src, "\n")
	list, ok := strings.CutPrefix(first, "-- lib:")
	if !ok {
		return "", fmt.Errorf("scripts/%s: the first line must name the lib sections it uses (-- lib: ...)", name)
	}
	wanted := map[string]bool{"record": true, "state": true}
	for _, section := range strings.Fields(list) {
		wanted[section] = true
	}
	// Dependencies point earlier in libSections: one pass from the end
	// closes them.
	for i := len(libSections) - 1; i >= 0; i-- {
		if wanted[libSections[i].name] {
			for _, need := range libSections[i].needs {
				wanted[need] = true
			}
		}
	}
	var b strings.Builder
	for _, section := range libSections {
		if !wanted[section.name] {
			continue
		}
		delete(wanted, section.name)
		text, err := read("lib/" + section.name + ".lua")
		if err != nil {
			return "", err
		}
		b.WriteString(text)
		b.WriteString("\n")
	}
	for unknown := range wanted {
		return "", fmt.Errorf("scripts/%s: unknown lib section %q", name, unknown)
	}
	b.WriteString(src)
	return b.String(), nil
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
		if src, err = assemble(e.name, src, read); err != nil {
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
