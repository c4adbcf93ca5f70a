// Command dqctl is the command line of the delay-queue server: push jobs
// (one, or a JSON-lines file in batches with a progress bar), pop, finish,
// delete, get, release and touch them, see the stats and topics, and manage
// the dead letters.
//
//	dqctl [global flags] <command> [flags] [arguments]
//
// Global flags (also accepted after the command):
//
//	--url    the server (default $DQ_URL, or http://127.0.0.1:9277)
//	--token  the auth token (default $DQ_AUTH_TOKEN)
//	--json   print the result as JSON instead of a table
//
// Exit status: 0 on success; 1 when the server refuses the request, cannot
// be reached, a job is not found, or some lines of a pushed file failed;
// 2 for a usage error (unknown command, bad flag or argument).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"github.com/delay-queue/delay-queue/client"
)

// version is printed by `dqctl version`. It is a variable only because the
// Makefile sets it at link time with -ldflags "-X main.version=...".
var version = "dev"

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// Defaults of the global flags.
const (
	defaultURL = "http://127.0.0.1:9277"
	envURL     = "DQ_URL"
	envToken   = "DQ_AUTH_TOKEN"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// app is one invocation: the global options, the outputs and the client.
type app struct {
	stdout, stderr io.Writer
	url, token     string
	json           bool
	client         *client.Client
}

// command is a subcommand: its usage line, a one-line summary, and the
// function that runs it with the arguments after its name.
type command struct {
	usage   string
	summary string
	run     func(ctx context.Context, a *app, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"push": {"push --topic T --id ID [--delay D] [--ttr D] [--body S | --body-file F] [--retry LIST] [--max-attempts N] [--if-absent]\n" +
			"       dqctl push --file jobs.jsonl [--batch 500]",
			"push a job, or a JSON-lines file of jobs in batches", cmdPush},
		"pop":     {"pop [--timeout D] [--count N] TOPIC[,TOPIC...] [TOPIC...]", "take ready jobs (the first listed topic wins)", cmdPop},
		"finish":  {"finish [--attempt N] ID [ID...]", "mark delivered jobs done", cmdFinish},
		"delete":  {"delete ID [ID...]", "remove jobs in any state", cmdDelete},
		"get":     {"get ID", "show a job", cmdGet},
		"release": {"release [--delay D] [--attempt N] ID", "give a reserved job back (a failed delivery)", cmdRelease},
		"touch":   {"touch [--attempt N] ID", "extend a reserved job's lease by its ttr", cmdTouch},
		"stats":   {"stats [TOPIC]", "count jobs per state, per topic", cmdStats},
		"topics":  {"topics", "list the topics that have jobs", cmdTopics},
		"dead": {"dead list [--offset N] [--limit N] TOPIC\n" +
			"       dqctl dead kick TOPIC (ID | --count N)\n" +
			"       dqctl dead delete TOPIC (ID | --all)",
			"list, kick (back to ready) or delete dead letters", cmdDead},
		"version": {"version", "print dqctl's version", func(_ context.Context, a *app, _ []string) error {
			fmt.Fprintln(a.stdout, "dqctl", version)
			return nil
		}},
	}
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// run executes one command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr}
	url := os.Getenv(envURL)
	if url == "" {
		url = defaultURL
	}
	a.url, a.token = url, os.Getenv(envToken)

	global := a.flagSet("dqctl")
	global.Usage = func() { printUsage(stderr) }
	if err := global.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if global.NArg() == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name, rest := global.Arg(0), global.Args()[1:]
	if name == "help" || name == "-h" {
		printUsage(stdout)
		return exitOK
	}
	cmd, ok := commands()[name]
	if !ok {
		fmt.Fprintf(stderr, "dqctl: unknown command %q\n\n", name)
		printUsage(stderr)
		return exitUsage
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	a.newClient()
	err := cmd.run(ctx, a, rest)
	var usage *usageError
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stderr, "usage: dqctl %s\n", cmd.usage)
		var help *helpRequest
		if errors.As(err, &help) {
			printFlags(stderr, help.flags)
		}
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "dqctl %s: %s\nusage: dqctl %s\n", name, usage.msg, cmd.usage)
		return exitUsage
	case errors.Is(err, errReported):
		return exitFailure
	default:
		fmt.Fprintf(stderr, "dqctl %s: %v\n", name, err)
		return exitFailure
	}
}

// errReported is returned by a command that already printed what went
// wrong and only needs the failure exit status.
var errReported = errors.New("failure already reported")

// newClient builds the client from the global flags (parsed again after
// the command's own flags, which may repeat them).
func (a *app) newClient() {
	a.client = client.New(a.url, client.WithToken(a.token), client.WithUserAgent("dqctl/"+version))
}

// flagSet returns a flag set that also takes the global flags, so that they
// may come before or after the command.
func (a *app) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(a.stderr)
	fs.StringVar(&a.url, "url", a.url, "server URL ($"+envURL+")")
	fs.StringVar(&a.token, "token", a.token, "auth token ($"+envToken+")")
	fs.BoolVar(&a.json, "json", a.json, "print JSON instead of a table")
	return fs
}

// globalFlags are the flags every flag set of flagSet takes.
var globalFlags = map[string]bool{"url": true, "token": true, "json": true}

// helpRequest is a command's -h: run prints the command's usage and the
// flags of its flag set. It wraps flag.ErrHelp.
type helpRequest struct{ flags *flag.FlagSet }

func (h *helpRequest) Error() string { return flag.ErrHelp.Error() }
func (h *helpRequest) Unwrap() error { return flag.ErrHelp }

// parse parses a command's flags wherever they appear among its arguments
// and returns the positional arguments ("--" ends the flags).
func (a *app) parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.Usage = func() {}
	// run prints the error once, with the command's usage.
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, &helpRequest{flags: fs}
			}
			return nil, usagef("%v", err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional = append(positional, rest[0])
		args = rest[1:]
	}
	a.newClient()
	return positional, nil
}

// printFlags lists the flags of fs, the command's own and then the global
// ones, each with its type and its default. The token's default is never
// shown: it may be the secret in $DQ_AUTH_TOKEN.
func printFlags(w io.Writer, fs *flag.FlagSet) {
	var own, global strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		b := &own
		if globalFlags[f.Name] {
			b = &global
		}
		fmt.Fprintf(b, "  --%s", f.Name)
		if kind := flagKind(f); kind != "" {
			fmt.Fprintf(b, " %s", kind)
		}
		fmt.Fprintf(b, "\n        %s", f.Usage)
		if def := shownDefault(f); def != "" {
			fmt.Fprintf(b, " (default %s)", def)
		}
		b.WriteString("\n")
	})
	if own.Len() > 0 {
		fmt.Fprintf(w, "\nflags:\n%s", own.String())
	}
	fmt.Fprintf(w, "\nglobal flags:\n%s", global.String())
}

// flagKind names the kind of value a flag takes, "" for a boolean.
func flagKind(f *flag.Flag) string {
	switch f.Value.(type) {
	case *durationValue:
		return "duration"
	case durationList:
		return "durations"
	}
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return ""
	}
	kind, _ := flag.UnquoteUsage(f)
	return kind
}

// shownDefault is a flag's default as help shows it: "" for none (an empty
// string, false, an empty list) and for the token.
func shownDefault(f *flag.Flag) string {
	switch {
	case f.Name == "token", f.DefValue == "", f.DefValue == "false":
		return ""
	case flagKind(f) == "string":
		return strconv.Quote(f.DefValue)
	}
	return f.DefValue
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, "dqctl: the delay-queue command line\n\nusage: dqctl [--url URL] [--token TOKEN] [--json] <command> [flags] [arguments]\n\ncommands:\n")
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for name := range cmds {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-8s %s\n", name, cmds[name].summary)
	}
	fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(`
Durations (--delay, --ttr, --timeout, --retry) are whole seconds (30) or Go
durations (1m30s). Global flags default to $DQ_URL (else http://127.0.0.1:9277)
and $DQ_AUTH_TOKEN. Exit status: 0 success, 1 failure, 2 usage error.
"dqctl <command> -h" shows a command's flags.`))
}
