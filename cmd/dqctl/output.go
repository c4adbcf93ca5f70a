package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

// previewRunes is how much of a job body a table shows.
const previewRunes = 60

// printJSON writes v as indented JSON on stdout.
func (a *app) printJSON(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes aligned columns on stdout.
type table struct {
	w *tabwriter.Writer
}

// table starts a table with the given header (none when empty).
func (a *app) table(header ...string) *table {
	t := &table{w: tabwriter.NewWriter(a.stdout, 0, 8, 2, ' ', 0)}
	if len(header) > 0 {
		t.row(header...)
	}
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// preview shortens a body for a table cell, and quotes it when it holds
// characters that would break the layout (tabs, newlines, other controls).
func preview(body string) string {
	short := body
	if utf8.RuneCountInString(body) > previewRunes {
		short = string([]rune(body)[:previewRunes]) + "…"
	}
	if strings.ContainsFunc(short, unicode.IsControl) || !utf8.ValidString(short) {
		return strconv.Quote(short)
	}
	return short
}

// formatTime shows a time in local time with milliseconds, and how far it
// is from now.
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	from := time.Until(t).Round(time.Second)
	relative := "now"
	switch {
	case from > 0:
		relative = "in " + from.String()
	case from < 0:
		relative = (-from).String() + " ago"
	}
	return t.Local().Format("2006-01-02 15:04:05.000") + " (" + relative + ")"
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}
