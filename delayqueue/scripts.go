package delayqueue

import (
	"embed"
	"fmt"

	"github.com/gomodule/redigo/redis"
)

//go:embed scripts/*.lua
var scriptFiles embed.FS

// scripts holds every state change of the engine, one Lua script each.
// Each is sent with EVALSHA, falling back to EVAL when Redis lost its script
// cache (a restart, SCRIPT FLUSH).
type scripts struct {
	push, claim, moveDue, finish, remove, unclaim, importLegacy *redis.Script
}

func loadScripts() (scripts, error) {
	lib, err := scriptFiles.ReadFile("scripts/lib.lua")
	if err != nil {
		return scripts{}, fmt.Errorf("read scripts/lib.lua: %w", err)
	}
	load := func(name string, keyCount int) (*redis.Script, error) {
		src, err := scriptFiles.ReadFile("scripts/" + name)
		if err != nil {
			return nil, fmt.Errorf("read scripts/%s: %w", name, err)
		}
		return redis.NewScript(keyCount, string(lib)+"\n"+string(src)), nil
	}
	var s scripts
	for _, e := range []struct {
		dst      **redis.Script
		name     string
		keyCount int
	}{
		{&s.push, "push.lua", 4},
		{&s.claim, "claim.lua", -1},
		{&s.moveDue, "movedue.lua", 1},
		{&s.finish, "finish.lua", 1},
		{&s.remove, "delete.lua", 1},
		{&s.unclaim, "unclaim.lua", 3},
		{&s.importLegacy, "import.lua", 6},
	} {
		if *e.dst, err = load(e.name, e.keyCount); err != nil {
			return scripts{}, err
		}
	}
	return s, nil
}

// loadAll sends every script to Redis, so the first calls need no EVAL.
func (s scripts) loadAll(c redis.Conn) error {
	for _, sc := range []*redis.Script{s.push, s.claim, s.moveDue, s.finish, s.remove, s.unclaim, s.importLegacy} {
		if err := sc.Load(c); err != nil {
			return fmt.Errorf("load script: %w", err)
		}
	}
	return nil
}
