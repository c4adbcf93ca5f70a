// Command testsummary runs `go test -json` and prints what a plain
// `go test` prints (each package's result line, and the whole output of
// every test that failed), then ends with a summary of the tests that were
// skipped, each with its skip message, and their count. A skipped test is
// not a passing one: the summary keeps the tests that did not run in view.
//
//	testsummary go test -json -race ./...
//
// It exits with the exit status of the command it ran; `make test` uses
// it.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: testsummary go test -json [flags] [packages]")
		os.Exit(2)
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run runs the command args, reads its test2json events from its standard
// output and writes the report to out. It returns the command's exit
// status.
func run(args []string, out, errOut io.Writer) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin = os.Stdin
	cmd.Stderr = errOut // build errors and go test's own complaints
	events, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(errOut, "testsummary:", err)
		return 2
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(errOut, "testsummary:", err)
		return 2
	}
	r := newReport(out)
	r.read(events)
	err = cmd.Wait()
	r.flush()
	r.summary()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		fmt.Fprintln(errOut, "testsummary:", err)
		return 2
	}
}

// event is one line of `go test -json` (go doc test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is a test that was skipped, and why.
type skip struct {
	pkg, test, reason string
}

// report turns the events into the plain output and the summary.
type report struct {
	out io.Writer
	// outputs holds each running test's output lines until it ends, by
	// package and test name: printed if it fails, read for the reason if
	// it is skipped, dropped if it passes.
	outputs map[[2]string][]string
	skipped []skip
	passed  int
	failed  int
}

func newReport(out io.Writer) *report {
	return &report{out: out, outputs: map[[2]string][]string{}}
}

// read handles every event; a line that is not an event (the command
// printing something of its own) is passed through.
func (r *report) read(events io.Reader) {
	sc := bufio.NewScanner(events)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Fprintln(r.out, string(line))
			continue
		}
		r.handle(e)
	}
}

func (r *report) handle(e event) {
	key := [2]string{e.Package, e.Test}
	switch {
	case e.Test == "" && e.Action == "output":
		// The package's own lines: "ok  pkg 1.2s", "FAIL pkg", a panic
		// outside any test. The bare PASS that ends a passing package
		// says nothing the ok line does not.
		if e.Output != "PASS\n" {
			fmt.Fprint(r.out, e.Output)
		}
	case e.Action == "build-output":
		fmt.Fprint(r.out, e.Output) // why a package did not build
	case e.Test == "" && e.Action == "fail":
		// Tests that never ended (a panic, the timeout) have their output
		// shown with the package's failure.
		for k, lines := range r.outputs {
			if k[0] == e.Package {
				fmt.Fprint(r.out, strings.Join(lines, ""))
				delete(r.outputs, k)
			}
		}
	case e.Test == "":
	case e.Action == "output":
		r.outputs[key] = append(r.outputs[key], e.Output)
	case e.Action == "pass":
		r.passed++
		delete(r.outputs, key)
	case e.Action == "fail":
		r.failed++
		for _, line := range r.outputs[key] {
			fmt.Fprint(r.out, line)
		}
		delete(r.outputs, key)
	case e.Action == "skip":
		r.skipped = append(r.skipped, skip{e.Package, e.Test, skipReason(r.outputs[key])})
		delete(r.outputs, key)
	}
}

// skipReason is the message a skipped test gave, the last of its output
// lines that is not one of go test's own (=== RUN, --- SKIP...), without
// its file:line prefix.
func skipReason(lines []string) string {
	for i := len(lines) - 1; i >= 0; i-- {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "=== ") || strings.HasPrefix(line, "--- ") {
			continue
		}
		if file, msg, ok := strings.Cut(line, ": "); ok && strings.Contains(file, ".go:") && !strings.Contains(file, " ") {
			return msg
		}
		return line
	}
	return "(no message)"
}

// flush prints the output of the tests that never ended, where no
// package's failure did.
func (r *report) flush() {
	for _, lines := range r.outputs {
		fmt.Fprint(r.out, strings.Join(lines, ""))
	}
	clear(r.outputs)
}

// summary prints the count of tests by outcome, then each skipped test.
func (r *report) summary() {
	fmt.Fprintf(r.out, "\ntests: %d passed, %d failed, %d skipped\n", r.passed, r.failed, len(r.skipped))
	if len(r.skipped) == 0 {
		return
	}
	fmt.Fprintln(r.out, "Skipped:")
	for _, s := range r.skipped {
		fmt.Fprintf(r.out, "  %s %s: %s\n", s.pkg, s.test, s.reason)
	}
}
