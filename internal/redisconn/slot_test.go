package redisconn

import (
	"errors"
	"testing"

	"github.com/gomodule/redigo/redis"
)

func TestSlot(t *testing.T) {
	t.Parallel()
	tests := []struct {
		key      string
		sameAs   string // the text that is hashed
		wantSlot int    // -1: only compare with sameAs
	}{
		// Check values of CRC16/XMODEM and of the Redis Cluster spec.
		{"123456789", "123456789", 12739},
		{"foo", "foo", 12182},
		{"bar", "bar", 5061},
		{"", "", 0},
		// Hash tags.
		{"{user1000}.following", "user1000", -1},
		{"{user1000}.followers", "user1000", -1},
		{"foo{}{bar}", "foo{}{bar}", -1}, // an empty tag: the whole key
		{"foo{{bar}}zap", "{bar", -1},    // the first '{', the first '}' after it
		{"foo{bar}{zap}", "bar", -1},     // only the first tag counts
		{"{bar", "{bar", -1},             // no '}': the whole key
		{"bar}{", "bar}{", -1},           // no '}' after the '{'
		{"dq_{dq_bucket_1}job:{x}", "dq_bucket_1", -1},
	}
	for _, tt := range tests {
		got := Slot(tt.key)
		if want := int(crc16(tt.sameAs) % SlotCount); got != want {
			t.Errorf("Slot(%q) = %d, want %d (the slot of %q)", tt.key, got, want, tt.sameAs)
		}
		if tt.wantSlot >= 0 && got != tt.wantSlot {
			t.Errorf("Slot(%q) = %d, want %d", tt.key, got, tt.wantSlot)
		}
	}
	if Slot("{user1000}.following") != Slot("{user1000}.followers") {
		t.Error("keys with one hash tag landed in different slots")
	}
	if Slot("foo{}{bar}") == Slot("bar") {
		t.Error("an empty hash tag made the key hash by a later tag")
	}
}

func TestReplyClassification(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err       error
		kind      string
		transient bool
	}{
		{redis.Error("MOVED 3999 127.0.0.1:6381"), RedirectMoved, true},
		{redis.Error("ASK 3999 127.0.0.1:6381"), RedirectAsk, true},
		{redis.Error("TRYAGAIN Multiple keys request during rehashing of slot"), RedirectTryAgain, true},
		{redis.Error("CLUSTERDOWN The cluster is down"), RedirectClusterDown, true},
		{redis.Error("READONLY You can't write against a read only replica."), "", true},
		{redis.Error("LOADING Redis is loading the dataset in memory"), "", true},
		{redis.Error("MASTERDOWN Link with MASTER is down"), "", true},
		{redis.Error("NOREPLICAS Not enough good replicas to write."), "", true},
		{redis.Error("BUSY Redis is busy running a script."), "", true},
		{redis.Error("UNBLOCKED force unblock from blocking operation"), "", true},
		{redis.Error("BUSYKEY Target key name already exists."), "", false},
		{redis.Error("ERR unknown command"), "", false},
		{redis.Error("NOSCRIPT No matching script."), "", false},
		{redis.Error("MOVEDX 1 a:1"), "", false},
		{errors.New("MOVED 3999 127.0.0.1:6381"), "", false}, // not a reply
		{nil, "", false},
		{fmtWrap(redis.Error("MOVED 1 127.0.0.1:7000")), RedirectMoved, true},
	}
	for _, tt := range tests {
		if got := RedirectKind(tt.err); got != tt.kind {
			t.Errorf("RedirectKind(%v) = %q, want %q", tt.err, got, tt.kind)
		}
		if got := isRedirect(tt.err); got != (tt.kind != "") {
			t.Errorf("isRedirect(%v) = %v", tt.err, got)
		}
		if got := IsTransientReply(tt.err); got != tt.transient {
			t.Errorf("IsTransientReply(%v) = %v, want %v", tt.err, got, tt.transient)
		}
	}
}

func fmtWrap(err error) error { return errors.Join(errors.New("script"), err) }

// Redis out of memory: the reply itself on Redis 7 and Valkey (from a
// script too), inside the script's ERR on Redis 6.
func TestIsOutOfMemoryReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err  error
		want bool
	}{
		{redis.Error("OOM command not allowed when used memory > 'maxmemory'."), true},
		{fmtWrap(redis.Error("OOM command not allowed when used memory > 'maxmemory'. script: 1b8a, on @user_script:630.")), true},
		{redis.Error("ERR Error running script (call to f_1b8a): @user_script:630: @user_script: 630: -OOM command not allowed when used memory > 'maxmemory'."), true},
		{redis.Error("ERR unknown command 'OOM'"), false},
		{redis.Error("NOPERM this user has no permissions to run the 'hset' command"), false},
		{errors.New("OOM command not allowed"), false}, // not a Redis reply
		{nil, false},
	}
	for _, tt := range tests {
		if got := IsOutOfMemoryReply(tt.err); got != tt.want {
			t.Errorf("IsOutOfMemoryReply(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestFunctionReplies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err              error
		missing, refused bool
	}{
		{redis.Error("ERR Function not found"), true, false},
		{fmtWrap(redis.Error("ERR Function not found")), true, false},
		{redis.Error("ERR unknown command 'FCALL', with args beginning with: 'f' '0' "), false, true},         // Redis 6
		{redis.Error("ERR unknown command `fcall`, with args beginning with: "), false, true},                 // miniredis
		{redis.Error("NOPERM this user has no permissions to run the 'fcall' command"), false, true},          // Redis 7.0
		{redis.Error("NOPERM User dq has no permissions to run the 'function|load' command"), false, true},    // Redis 7.2, Valkey
		{redis.Error("NOPERM User dq has no permissions to run the 'zadd' command"), false, false},            // inside a function
		{redis.Error("ERR The user executing the script can't run this command or subcommand"), false, false}, // the same, Redis 7.0
		{redis.Error("ERR Library 'x' already exists"), false, false},
		{errors.New("ERR Function not found"), false, false}, // not a Redis reply
		{nil, false, false},
	}
	for _, tt := range tests {
		if got := IsFunctionMissingReply(tt.err); got != tt.missing {
			t.Errorf("IsFunctionMissingReply(%v) = %v, want %v", tt.err, got, tt.missing)
		}
		if got := IsFunctionsRefusedReply(tt.err); got != tt.refused {
			t.Errorf("IsFunctionsRefusedReply(%v) = %v, want %v", tt.err, got, tt.refused)
		}
	}
}

func TestParseRedirect(t *testing.T) {
	t.Parallel()
	tests := []struct {
		reply string
		from  string
		want  redirect
		ok    bool
	}{
		{"MOVED 3999 127.0.0.1:6381", "127.0.0.1:7000", redirect{RedirectMoved, 3999, "127.0.0.1:6381"}, true},
		{"ASK 16383 10.0.0.2:7001", "", redirect{RedirectAsk, 16383, "10.0.0.2:7001"}, true},
		// Redis writes IPv6 addresses without brackets.
		{"MOVED 0 ::1:7002", "", redirect{RedirectMoved, 0, "[::1]:7002"}, true},
		// An unknown endpoint: the host of the node that answered.
		{"MOVED 12 :7003", "192.0.2.7:7000", redirect{RedirectMoved, 12, "192.0.2.7:7003"}, true},
		{"MOVED 16384 127.0.0.1:1", "", redirect{}, false},
		{"MOVED x 127.0.0.1:1", "", redirect{}, false},
		{"MOVED 1 127.0.0.1", "", redirect{}, false},
		{"MOVED 1", "", redirect{}, false},
		{"TRYAGAIN Multiple keys", "", redirect{}, false},
	}
	for _, tt := range tests {
		got, ok := parseRedirect(redis.Error(tt.reply), tt.from)
		if ok != tt.ok || got != tt.want {
			t.Errorf("parseRedirect(%q, %q) = %+v, %v; want %+v, %v", tt.reply, tt.from, got, ok, tt.want, tt.ok)
		}
	}
}

func TestParseClusterSlots(t *testing.T) {
	t.Parallel()
	node := func(host any, port int64, id string) any { return []any{host, port, []byte(id)} }
	bulk := func(s string) any { return []byte(s) }
	reply := []any{
		[]any{int64(0), int64(5460), node(bulk("127.0.0.1"), 7000, "a"), node(bulk("127.0.0.1"), 7003, "d")},
		[]any{int64(5461), int64(10922), node(bulk(""), 7001, "b")}, // empty host: the node asked
		[]any{int64(10923), int64(16000), node(nil, 7002, "c")},     // NULL host (Redis 7): likewise
		[]any{int64(16001), int64(16383), node(bulk("?"), 7004, "e")},
	}
	m, err := parseClusterSlots(reply, "192.0.2.1:7001")
	if err != nil {
		t.Fatalf("parseClusterSlots: %v", err)
	}
	for _, tt := range []struct {
		slot int
		want string
	}{{0, "127.0.0.1:7000"}, {5460, "127.0.0.1:7000"}, {5461, "192.0.2.1:7001"}, {10923, "192.0.2.1:7002"}, {16001, ""}, {16383, ""}} {
		if got := m.addr(tt.slot); got != tt.want {
			t.Errorf("slot %d served by %q, want %q", tt.slot, got, tt.want)
		}
	}
	if got := m.covered(); got != 16001 {
		t.Errorf("covered = %d, want 16001", got)
	}
	if len(m.replicas) != 1 || m.replicas[0] != "127.0.0.1:7003" {
		t.Errorf("replicas = %v, want [127.0.0.1:7003]", m.replicas)
	}

	for _, bad := range []any{
		"not an array",
		[]any{[]any{int64(0), int64(10)}},
		[]any{[]any{int64(10), int64(5), node(bulk("h"), 1, "x")}},
		[]any{[]any{int64(0), int64(16384), node(bulk("h"), 1, "x")}},
		[]any{[]any{int64(0), int64(1), []any{bulk("h")}}},
	} {
		if _, err := parseClusterSlots(bad, "127.0.0.1:1"); err == nil {
			t.Errorf("parseClusterSlots(%v) succeeded, want an error", bad)
		}
	}
}
