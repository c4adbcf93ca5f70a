package redistest

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// The rules the tests give the server's user are those the docs tell
// operators to give it, in both places they say so.
func TestServerACLRulesAreTheDocumented(t *testing.T) {
	t.Parallel()
	want := strings.TrimSuffix(fmt.Sprintln(ServerACLRules()...), "\n") + " +cluster|slots"
	for _, path := range []string{"../../docs/operations.md", "../../delay-queue.conf"} {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		// The conf's example runs over two comment lines.
		flat := strings.Join(strings.Fields(strings.ReplaceAll(string(text), "\n;", " ")), " ")
		if !strings.Contains(flat, "ACL SETUSER dq on >PASSWORD "+want) {
			t.Errorf("%s does not give the server's user the rules %q", path, want)
		}
	}
}
