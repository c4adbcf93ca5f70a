package main

import (
	"bytes"
	"strings"
	"testing"
)

// "dqctl <command> -h" shows the usage and every flag with its default,
// but never the token.
func TestCommandHelpShowsFlagsAndDefaults(t *testing.T) {
	t.Setenv(envToken, "token-from-the-environment")
	t.Setenv(envURL, "")
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"push", "-h"}, []string{"usage: dqctl push --topic T",
			"flags:", "--ttr duration", "(default 1m0s)", "--batch int", "(default 500)", "--retry durations",
			"--max-attempts int", "(default 0)", "--if-absent\n",
			"global flags:", "--url string", `(default "http://127.0.0.1:9277")`, "--token string", "--json\n"}},
		{[]string{"pop", "--help"}, []string{"usage: dqctl pop", "--timeout duration", "(default 0s)", "--count int"}},
		{[]string{"finish", "-h"}, []string{"usage: dqctl finish [--attempt N] ID", "--attempt int"}},
		{[]string{"dead", "list", "-h"}, []string{"usage: dqctl dead list", "--limit int", "(default 50)", "--offset int"}},
		{[]string{"dead", "-h"}, []string{"usage: dqctl dead list", "dqctl dead kick", "global flags:"}},
		{[]string{"stats", "-h"}, []string{"usage: dqctl stats", "global flags:", "--url string"}},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(tc.args, &stdout, &stderr); code != exitOK {
				t.Fatalf("exit %d, stderr %q", code, stderr.String())
			}
			help := stderr.String()
			for _, w := range tc.want {
				if !strings.Contains(help, w) {
					t.Errorf("help lacks %q:\n%s", w, help)
				}
			}
			if strings.Contains(help, "token-from-the-environment") {
				t.Errorf("help shows the token:\n%s", help)
			}
		})
	}
}
