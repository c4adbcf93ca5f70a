package redistest

import "testing"

// ServerACLRules are the ACL rules that docs/operations.md and
// delay-queue.conf give the server's own user, but for "+cluster|slots",
// which only a cluster needs: tests add it where they want it. A fresh
// slice on each call, for callers to append to.
func ServerACLRules() []any {
	return []any{"~*", "&*", "-@all", "+@read", "+@write", "+@scripting", "+@connection", "+@blocking",
		"-@dangerous", "+info", "+role", "+time"}
}

// SetACLUser makes user, logging in with password, under ServerACLRules
// and extra, through do: a redis.Conn's Do, or a cluster node's.
func SetACLUser(t testing.TB, do func(string, ...any) (any, error), user, password string, extra ...any) {
	t.Helper()
	args := append(append([]any{"SETUSER", user, "on", ">" + password}, ServerACLRules()...), extra...)
	if _, err := do("ACL", args...); err != nil {
		t.Fatalf("ACL SETUSER %s: %v", user, err)
	}
}
