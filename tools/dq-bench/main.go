// Command dq-bench is the delay-queue load tool. It speaks HTTP to a running
// server as real clients do (keep-alive connections, N concurrent clients),
// reads the server's Redis directly (INFO, CLIENT LIST, FLUSHDB between
// phases; on a cluster, every primary), and prints the project's
// performance figures (docs/performance.md) on stdout as "name value unit",
// throughputs also as a ratio to redis-benchmark's SET requests/s measured
// against the same Redis in the same run, and for every phase the Redis CPU per job it handled
// (with each primary's share on a cluster). It drives any server by URL,
// older builds included; figures a server cannot give are printed n/a.
//
// It empties the server's Redis db: point it at a throwaway Redis only.
// scripts/bench.sh (make bench) starts everything and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dq-bench: "+err.Error())
		os.Exit(1)
	}
}

// Phase names, in the order they run. Each prints the figures named after it.
const (
	phasePush        = "push"
	phaseFloor       = "http-floor"
	phasePopFinish   = "pop-finish"
	phasePushDelayed = "push-delayed"
	phasePushBatch   = "push-batch"
	phasePopBatch    = "pop-batch"
	phaseLateness    = "lateness"
	phaseBurst       = "burst-drain"
	phaseBurstSingle = "burst-drain-single"
	phaseLifecycle   = "lifecycle"
	phaseMemory      = "redis-bytes-per-job"
	phaseHeldPops    = "held-pops"
)

// allPhases lists every phase in running order.
func allPhases() []string {
	return []string{
		phasePush, phaseFloor, phasePopFinish, phasePushDelayed, phasePushBatch, phasePopBatch,
		phaseLateness, phaseBurst, phaseBurstSingle, phaseLifecycle, phaseMemory, phaseHeldPops,
	}
}

// settings are the tool's flags.
type settings struct {
	serverURL     string
	httpClient    string // clientLean or clientStd
	loop          bool   // push, pop-finish and http-floor on the event-loop client
	floorURL      string // the http-floor phase's empty server
	redisAddr     string
	redisDB       int
	redisPassword string
	keyPrefix     string // the server's key_prefix: its layout record is <prefix>layout
	maxActive     int    // the server's redis.max_active, for the connection budget
	setRPS        float64
	serverPID     int
	phases        []string

	clients        int // concurrent clients of push, pop-finish, lateness and burst
	pushJobs       int // push, pop-finish and push-delayed
	batchJobs      int // push-batch and pop-batch
	batchClients   int
	batchSize      int // jobs per batch push
	popCount       int // count of a batch pop
	latenessJobs   int
	latenessSpread time.Duration
	burstJobs      int
	lifecycleJobs  int
	memoryJobs     int
	memoryClients  int
	heldPops       int
	heldTopicLists int
	heldSamples    int
	heldSettle     time.Duration
}

// sizeFlag is a size with its full-run default and its -quick default.
type sizeFlag struct {
	name        string
	target      *int
	full, quick int
	usage       string
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var s settings
	flags := flag.NewFlagSet("dq-bench", flag.ContinueOnError)
	flags.SetOutput(stderr)
	flags.StringVar(&s.serverURL, "url", "http://127.0.0.1:9277", "base `URL` of the delay-queue server")
	flags.StringVar(&s.httpClient, "http-client", clientLean,
		"HTTP client: lean (a minimal keep-alive HTTP/1.1 client, like wrk) or std (Go's net/http)")
	flags.BoolVar(&s.loop, "loop", runtime.GOOS == "linux",
		"run push, pop-finish and http-floor on the event-loop client (epoll, Linux only), the cheapest for a shared machine; false: on goroutines with -http-client")
	flags.StringVar(&s.redisAddr, "redis", "127.0.0.1:6379",
		"`host:port` of the server's Redis (its db is emptied!); of any node of a cluster, whose primaries are then all read and emptied")
	flags.IntVar(&s.redisDB, "redis-db", 1, "the server's redis.db")
	flags.StringVar(&s.redisPassword, "redis-password", "", "the server's redis.password")
	flags.StringVar(&s.keyPrefix, "key-prefix", "dq_", "the server's key_prefix")
	flags.IntVar(&s.maxActive, "redis-max-active", 0,
		"the server's redis.max_active, for the held-pops connection budget (0: the server's default)")
	flags.Float64Var(&s.setRPS, "set-rps", 0, "redis-benchmark SET requests/s of the same Redis, for the ratios (0: none)")
	flags.IntVar(&s.serverPID, "server-pid", 0, "`pid` of the server process, to read its RSS and tell its Redis connections from others' (0: RSS not reported, every connection but the tool's counted)")
	phaseList := flags.String("phases", strings.Join(allPhases(), ","), "comma-separated phases to run")
	quick := flags.Bool("quick", false, "small sizes for a quick run (sizes given explicitly still apply)")
	cpuProfile := flags.String("cpuprofile", "", "write the tool's own CPU profile to `file` (to see what the load costs)")
	flags.StringVar(&s.floorURL, "floor-url", "", "base `URL` of an empty server (dq-bench -serve-floor) for the http-floor phase")
	serveFloorAddr := flags.String("serve-floor", "", "run the http-floor phase's empty server on `host:port` until interrupted, and nothing else")
	freePort := flags.Bool("free-port", false, "print a free loopback TCP port and exit (for scripts)")
	redisCPU := flags.Bool("redis-cpu", false,
		"print the CPU seconds (used_cpu_user + used_cpu_sys) summed over the primaries of -redis and exit (for scripts)")
	flags.DurationVar(&s.latenessSpread, "lateness-spread", 3*time.Second, "lateness: due times spread over this long")
	flags.DurationVar(&s.heldSettle, "held-settle", 2*time.Second,
		"held-pops: wait this long after the last /pop was sent, for the server to register it")

	sizes := []sizeFlag{
		{"clients", &s.clients, 32, 32, "concurrent clients (push, pop-finish, lateness and burst consumers)"},
		{"push-jobs", &s.pushJobs, 100000, 5000, "jobs of push, pop-finish and push-delayed"},
		{"batch-jobs", &s.batchJobs, 200000, 20000, "jobs of push-batch and pop-batch"},
		{"batch-clients", &s.batchClients, 8, 8, "concurrent clients of push-batch"},
		{"batch-size", &s.batchSize, 1000, 1000, "jobs per batch push"},
		{"pop-count", &s.popCount, 100, 100, "count of a batch pop"},
		{"lateness-jobs", &s.latenessJobs, 2000, 300, "jobs of the lateness phase"},
		{"burst-jobs", &s.burstJobs, 50000, 5000, "jobs due in the same second (burst-drain)"},
		{"lifecycle-jobs", &s.lifecycleJobs, 20000, 2000, "jobs of the lifecycle phase (push with a delay, pop, finish)"},
		{"memory-jobs", &s.memoryJobs, 100000, 10000, "delayed jobs of redis-bytes-per-job"},
		{"memory-clients", &s.memoryClients, 64, 64, "concurrent clients pushing them"},
		{"held-pops", &s.heldPops, 10000, 1000, "concurrent held /pop requests"},
		{"held-topic-lists", &s.heldTopicLists, 1000, 100, "distinct topic lists of the held pops"},
		{"held-samples", &s.heldSamples, 1000, 200, "pushes timed from push to delivery to a waiter"},
	}
	for _, size := range sizes {
		flags.IntVar(size.target, size.name, size.full, size.usage+fmt.Sprintf(" (-quick: %d)", size.quick))
	}
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", flags.Arg(0))
	}
	if *serveFloorAddr != "" {
		return serveFloor(ctx, *serveFloorAddr)
	}
	if *freePort {
		port, err := findFreePort()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, port)
		return nil
	}
	if *redisCPU {
		return printRedisCPU(stdout, s)
	}
	if *quick {
		given := map[string]bool{}
		flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
		for _, size := range sizes {
			if !given[size.name] {
				*size.target = size.quick
			}
		}
		if !given["lateness-spread"] {
			s.latenessSpread = time.Second
		}
	}
	for _, size := range sizes {
		if *size.target < 1 {
			return fmt.Errorf("-%s must be at least 1, got %d", size.name, *size.target)
		}
	}
	if s.popCount > 100 || s.batchSize > 1000 {
		return fmt.Errorf("-pop-count is at most 100 and -batch-size at most 1000 (the server's limits)")
	}
	for _, p := range strings.Split(*phaseList, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(allPhases(), p) {
			return fmt.Errorf("unknown phase %q in -phases; known: %s", p, strings.Join(allPhases(), ","))
		}
		s.phases = append(s.phases, p)
	}
	s.serverURL = strings.TrimRight(s.serverURL, "/")

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	b, err := newBench(s, stdout, logger)
	if err != nil {
		return err
	}
	defer b.close()
	return b.run(ctx)
}

// findFreePort returns a loopback port that was free a moment ago.
func findFreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
