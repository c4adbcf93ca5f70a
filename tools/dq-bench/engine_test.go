package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/delay-queue/delay-queue/delayqueue"
	"github.com/delay-queue/delay-queue/internal/enginetest"
	"github.com/delay-queue/delay-queue/internal/redisconn"
	"github.com/delay-queue/delay-queue/internal/redistest"
	"github.com/delay-queue/delay-queue/routers"
)

// engineBlockTimeout is the test servers' queue_block_timeout: above the
// held-pops phase's hold, as the default is.
const engineBlockTimeout = 178 * time.Second

// startEngine serves the real engine over HTTP on the Redis redisOpts
// names, in this process, until the test ends; it returns the server's URL.
func startEngine(t *testing.T, redisOpts redisconn.Options, partitions int) string {
	t.Helper()
	logger := slog.New(redistest.LogHandler(t, slog.LevelWarn))
	redisOpts.ConnectTimeout = time.Second
	redisOpts.ReadTimeout = engineBlockTimeout + 10*time.Second
	redisOpts.WriteTimeout = 3 * time.Second
	q := enginetest.StartWith(t, redisOpts, delayqueue.Options{
		BucketSize: partitions, BucketName: "dq_bucket_%d", QueueName: "dq_queue_%s",
		BlockTimeout: engineBlockTimeout, ScanInterval: 100 * time.Millisecond,
	}, logger)
	srv := httptest.NewServer(routers.New(q, routers.Options{BlockTimeout: engineBlockTimeout}, logger))
	t.Cleanup(srv.Close)
	return srv.URL
}

// runPhases runs phases of the tool against the server at url, whose Redis
// is redisAddr (db), and returns what it printed.
func runPhases(t *testing.T, url, redisAddr string, db int, phases ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, stderr bytes.Buffer
	args := []string{"-url", url, "-redis", redisAddr, "-redis-db", strconv.Itoa(db), "-quick",
		"-server-pid", strconv.Itoa(os.Getpid()), "-phases", strings.Join(phases, ","),
		"-clients", "4", "-lifecycle-jobs", "300", "-held-pops", "60", "-held-topic-lists", "6",
		"-held-samples", "20", "-held-settle", "300ms"}
	if err := run(ctx, args, &out, &stderr); err != nil {
		t.Fatalf("dq-bench %v: %v\nstdout:\n%s\nstderr:\n%s", args, err, out.String(), stderr.String())
	}
	t.Logf("dq-bench printed:\n%s", out.String())
	return out.String()
}

// figure finds the line of name in the tool's output and returns its
// fields after the name.
func figure(t *testing.T, out, name string) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if fields := strings.Fields(line); len(fields) > 1 && fields[0] == name {
			return fields[1:]
		}
	}
	t.Fatalf("no %s line in:\n%s", name, out)
	return nil
}

// positiveMicros checks a "<phase>-redis-cpu N us/job ..." line.
func positiveMicros(t *testing.T, out, phase string) []string {
	t.Helper()
	fields := figure(t, out, phase+"-redis-cpu")
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || v <= 0 || fields[1] != "us/job" {
		t.Errorf("%s-redis-cpu %v: want a positive µs per job", phase, fields)
	}
	return fields
}

var budgetLine = regexp.MustCompile(`^(\d+) conns target<=(\d+) (ok|MISS) budget=(\d+) primaries x 48 max_active \+ (\d+) partitions x (\d+) loops$`)

// checkHeldConns checks the held-pops connection line against the budget
// of primaries and partitions, and returns the connections counted.
func checkHeldConns(t *testing.T, out string, primaries, partitions int) int {
	t.Helper()
	line := strings.Join(figure(t, out, "held-pops-redis-conns"), " ")
	m := budgetLine.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("held-pops-redis-conns %q: not the budget's form", line)
	}
	conns, _ := strconv.Atoi(m[1])
	budget, _ := strconv.Atoi(m[2])
	if want := connectionBudget(primaries, 48, partitions); budget != want || m[4] != strconv.Itoa(primaries) ||
		m[5] != strconv.Itoa(partitions) {
		t.Errorf("budget line %q: want %d primaries, %d partitions, budget %d", line, primaries, partitions, want)
	}
	if conns < 1 || conns > budget || m[3] != "ok" {
		t.Errorf("held-pops-redis-conns %q: want between 1 and the budget", line)
	}
	return conns
}

// On one Redis, the lifecycle and held-pops phases run through the real
// engine and report the Redis CPU per job, and the connections against the
// budget of the partitions the server recorded.
func TestPhasesOnTheEngine(t *testing.T) {
	skipWithoutLoop(t)
	redisServer := redistest.Start(t)
	url := startEngine(t, redisconn.Options{Addr: redisServer.Addr, DB: 1}, 3)
	out := runPhases(t, url, redisServer.Addr, 1, phaseLifecycle, phaseHeldPops)

	if got := figure(t, out, "redis-partitions"); got[0] != "3" {
		t.Errorf("redis-partitions %v, want 3 (the recorded layout)", got)
	}
	figure(t, out, "lifecycle-push")
	figure(t, out, "lifecycle-pop-finish")
	if fields := positiveMicros(t, out, phaseLifecycle); len(fields) != 2 {
		t.Errorf("lifecycle-redis-cpu %v: one Redis has no shares", fields)
	}
	positiveMicros(t, out, phaseHeldPops)
	checkHeldConns(t, out, 1, 3)

	// The flushes between phases kept the server's layout record.
	conn, err := redis.Dial("tcp", redisServer.Addr, redis.DialDatabase(1))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if n, err := redis.Int(conn.Do("HGET", "dq_layout", "partitions")); err != nil || n != 3 {
		t.Errorf("after the run, dq_layout partitions = %d, %v; want 3", n, err)
	}
}

// On a cluster, the tool reads every primary: it names them, prints each
// one's share of the Redis CPU, and counts the server's connections on
// each.
func TestPhasesOnTheEngineOnACluster(t *testing.T) {
	skipWithoutLoop(t)
	cluster := redistest.StartCluster(t, 3, 0)
	const partitions = 6
	url := startEngine(t, redisconn.Options{ClusterAddrs: cluster.Addrs()}, partitions)
	out := runPhases(t, url, cluster.Addrs()[0], 0, phaseLifecycle, phaseHeldPops)

	primaries := cluster.Primaries(t)
	if got := figure(t, out, "redis-primaries"); got[0] != "3" || got[2] != strings.Join(primaries, ",") {
		t.Errorf("redis-primaries %v, want 3 nodes %v", got, primaries)
	}
	shares := regexp.MustCompile(`^shares=([\d.]+),([\d.]+),([\d.]+)% max-share=[\d.]+% target<=40 (ok|MISS)$`)
	for _, phase := range []string{phaseLifecycle, phaseHeldPops} {
		fields := positiveMicros(t, out, phase)
		m := shares.FindStringSubmatch(strings.Join(fields[2:], " "))
		if m == nil {
			t.Errorf("%s-redis-cpu %v: no shares of 3 primaries", phase, fields)
			continue
		}
		total := 0.0
		for _, s := range m[1:4] {
			v, _ := strconv.ParseFloat(s, 64)
			total += v
		}
		if total < 99.8 || total > 100.2 {
			t.Errorf("%s shares %v add up to %.1f%%", phase, m[1:4], total)
		}
	}
	conns := checkHeldConns(t, out, 3, partitions)
	per := figure(t, out, "held-pops-redis-conns-per-primary")
	sum := 0
	for _, s := range strings.Split(per[0], ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Errorf("held-pops-redis-conns-per-primary %v: want a connection to every primary", per)
		}
		sum += n
	}
	if sum != conns {
		t.Errorf("per primary %v adds up to %d, the total says %d", per, sum, conns)
	}
}

// The inspector finds every primary of a cluster from one node, and its
// flush empties all of them but keeps the server's layout record.
func TestInspectorOnACluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	if _, err := dialRedis(cluster.Addrs()[0], 1, "", "dq_"); err == nil {
		t.Error("dialRedis accepted db 1 on a cluster")
	}
	r, err := dialRedis(cluster.Addrs()[1], 0, "", "dq_")
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if want := strings.Join(cluster.Primaries(t), ","); strings.Join(r.addrs(), ",") != want {
		t.Fatalf("inspector reads %v, want %s", r.addrs(), want)
	}
	// A key on every primary (tags chosen by slot owner), and the layout.
	owners := map[string]bool{}
	for i := 0; len(owners) < 3 && i < 1000; i++ {
		key := fmt.Sprintf("{k%d}x", i)
		owner := cluster.SlotOwner(t, redisconn.Slot(key))
		if owners[owner] {
			continue
		}
		owners[owner] = true
		if _, err := cluster.Node(owner).Do("SET", key, "v"); err != nil {
			t.Fatal(err)
		}
	}
	layoutOwner := cluster.SlotOwner(t, redisconn.Slot("dq_layout"))
	if _, err := cluster.Node(layoutOwner).Do("HSET", "dq_layout", "partitions", 12, "version", 2); err != nil {
		t.Fatal(err)
	}
	if err := r.readLayout(); err != nil {
		t.Fatal(err)
	}
	if r.partitions() != 12 {
		t.Errorf("partitions = %d, want 12", r.partitions())
	}
	if n, err := r.dbSize(); err != nil || n != 4 {
		t.Errorf("dbSize = %d, %v; want 4 over the primaries", n, err)
	}
	if err := r.flushDB(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.dbSize(); err != nil || n != 1 {
		t.Errorf("after flushDB, dbSize = %d, %v; want 1 (the layout record)", n, err)
	}
	if n, err := redis.Int(cluster.Node(layoutOwner).Do("HGET", "dq_layout", "partitions")); err != nil || n != 12 {
		t.Errorf("after flushDB, dq_layout partitions = %d, %v; want 12", n, err)
	}
	cpu, err := r.cpuSeconds()
	if err != nil || len(cpu) != 3 {
		t.Fatalf("cpuSeconds = %v, %v; want one figure per primary", cpu, err)
	}
	// dq-bench -redis-cpu, which scripts/bench.sh reads around its
	// redis-benchmark runs, prints the sum over the primaries: no less than
	// the three clocks read before it (one node's alone would be).
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-redis", cluster.Addrs()[2], "-redis-db", "0", "-redis-cpu"},
		&out, io.Discard); err != nil {
		t.Fatal(err)
	}
	printed, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
	if sum := cpu[0] + cpu[1] + cpu[2]; err != nil || printed < sum {
		t.Errorf("-redis-cpu printed %q, want the primaries' sum, at least %.6f", out.String(), sum)
	}
}
