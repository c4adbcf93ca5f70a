// Command delay-queue is the HTTP delay-queue server, a drop-in replacement
// for ouqiang/delay-queue. This package owns the flags, the wiring of the
// config, engine and HTTP layer, signal handling and the shutdown order.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/delay-queue/delay-queue/config"
	"github.com/delay-queue/delay-queue/internal/logwriter"
)

// version is the release printed by -v. It is a variable only because the
// linker can set nothing else: make build passes
// -ldflags "-X main.version=$(git describe --always --dirty)".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal starts a graceful shutdown; restoring the default
	// handling then lets a second one end the process at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		// One line, no stack trace: errors carry their context already.
		fmt.Fprintln(os.Stderr, "delay-queue: "+strings.ReplaceAll(err.Error(), "\n", "; "))
		var usage usageError
		if errors.As(err, &usage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError reports bad command-line arguments (exit status 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() + " (see delay-queue -h)" }
func (e usageError) Unwrap() error { return e.err }

// run is the whole program: it parses args, loads the config, and serves
// until ctx is done (a signal), then shuts down in order and returns nil.
// Logs go to stderr; -v and -h print to stdout.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	flags := flag.NewFlagSet("delay-queue", flag.ContinueOnError)
	// Parse errors come back as one error for main to print; the flag
	// package would otherwise print them along with the whole usage.
	flags.SetOutput(io.Discard)
	confPath := flags.String("c", "", "`path` of the ini config file (default: built-in defaults)")
	showVersion := flags.Bool("v", false, "print the version and exit")
	embedded := flags.Bool("embedded", false,
		"run an in-process Redis (miniredis) instead of connecting to redis.host: jobs live in memory only")
	repartition := flags.Int("repartition", 0,
		"with every server stopped, move the jobs in Redis to `N` partitions (bucket_size), then exit")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "Usage: delay-queue [-c delay-queue.conf] [-embedded] [-v] [-repartition N]")
			flags.SetOutput(stdout)
			flags.PrintDefaults()
			return nil
		}
		return usageError{err}
	}
	if flags.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", flags.Arg(0))}
	}
	if *showVersion {
		fmt.Fprintf(stdout, "delay-queue %s\n", version)
		return nil
	}

	cfg := config.Default()
	var warnings []string
	if *confPath != "" {
		var err error
		if cfg, warnings, err = config.Load(*confPath); err != nil {
			return err
		}
	}
	if *embedded {
		cfg.Redis.Host = config.EmbeddedHost
	}
	fromEnv := cfg.ApplyEnv(os.LookupEnv)
	if err := cfg.Validate(); err != nil {
		return err
	}

	// Log lines go out from one goroutine, gathered (see logwriter).
	logOut := logwriter.New(stderr)
	defer logOut.Close()
	logger := newLogger(logOut, cfg)
	for _, w := range warnings {
		logger.Warn("config file warning", "warning", w)
	}
	for _, name := range fromEnv {
		// The name only: the value may be a secret.
		logger.Info("setting taken from the environment", "variable", name)
	}
	var err error
	if *repartition != 0 {
		err = repartitionJobs(ctx, cfg, *repartition, logger, stdout)
	} else {
		err = serve(ctx, cfg, logger)
	}
	if err != nil && strings.Contains(err.Error(), confPlaceholder) {
		return confPathError{err: err, path: *confPath}
	}
	return err
}

// confPlaceholder stands for the config file in the engine's advice to run
// a command ("run delay-queue -c <conf> -repartition 6"): the engine does
// not know the path.
const confPlaceholder = "-c <conf>"

// confPathError is an error whose advice names the config file this
// process was started with (none: the built-in defaults, no -c).
type confPathError struct {
	err  error
	path string
}

func (e confPathError) Error() string {
	if e.path == "" {
		return strings.ReplaceAll(e.err.Error(), confPlaceholder+" ", "")
	}
	path := e.path
	if strings.ContainsAny(path, " \t'\"") {
		path = strconv.Quote(path)
	}
	return strings.ReplaceAll(e.err.Error(), confPlaceholder, "-c "+path)
}

func (e confPathError) Unwrap() error { return e.err }

// newLogger builds the process logger from log_level and log_format.
func newLogger(w io.Writer, cfg config.Config) *slog.Logger {
	opts := &slog.HandlerOptions{Level: cfg.LogLevel}
	if cfg.LogFormat == config.LogFormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
