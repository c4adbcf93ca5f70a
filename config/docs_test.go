package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The tables of settings in the README and docs/ state defaults in conf
// syntax (| `key` | `value` | ...). Text cannot import a constant, so this
// checks each against Default(): the one place the docs cannot take theirs
// from. (The shipped delay-queue.conf is checked by
// TestShippedConfDocumentsEveryKey.)
func TestDocumentedDefaultsAreTheDefaults(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	paths = append([]string{filepath.Join("..", "README.md")}, paths...)
	setters := settingSetters()
	checked := map[string]bool{}
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(text), "\n") {
			for key, value := range documentedDefaults(line, setters) {
				checked[key] = true
				got, warnings, err := Parse([]byte(key + " = " + value + "\n"))
				if err != nil || len(warnings) > 0 {
					t.Errorf("%s:%d: %s = %s does not load: %v %q", path, i+1, key, value, err, warnings)
					continue
				}
				if !reflect.DeepEqual(got, Default()) {
					t.Errorf("%s:%d: says %s defaults to %q, which is not its default in config.Default", path, i+1, key, value)
				}
			}
		}
	}
	// The README's table of settings states most of them; finding fewer
	// means this test no longer reads it.
	if len(checked) < len(setters)/2 {
		t.Errorf("checked the documented defaults of %d keys, want at least %d of the %d: where did the table of settings go?",
			len(checked), len(setters)/2, len(setters))
	}
}

// documentedDefaults reads a markdown table row whose first cell lists
// conf keys (`a`, `b`) and whose second lists as many defaults (`x`,
// empty, or unset, which is skipped). Other rows give nothing.
func documentedDefaults(line string, setters map[string]setter) map[string]string {
	cells := strings.Split(line, "|")
	if !strings.HasPrefix(strings.TrimSpace(line), "|") || len(cells) < 4 {
		return nil
	}
	keys := strings.Split(cells[1], ",")
	values := strings.Split(cells[2], ",")
	if len(keys) != len(values) {
		return nil
	}
	out := map[string]string{}
	for i := range keys {
		key, ok := backticked(keys[i])
		if _, known := setters[key]; !ok || !known {
			return nil
		}
		value := strings.TrimSpace(values[i])
		switch value {
		case "unset":
			continue
		case "empty":
			value = ""
		default:
			if value, ok = backticked(value); !ok {
				return nil
			}
		}
		out[key] = value
	}
	return out
}

func backticked(s string) (string, bool) {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '`' || s[len(s)-1] != '`' {
		return "", false
	}
	return s[1 : len(s)-1], true
}
