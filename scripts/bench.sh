#!/usr/bin/env bash
# bench.sh runs the performance benchmark (make bench): it builds the server
# and the load tool, starts a throwaway redis-server and the server on free
# loopback ports, measures redis-benchmark's SET and LPOP rates on that same
# Redis, then runs cmd/dq-bench, which prints every figure as
# "name value unit", throughputs also as a ratio to SET req/s. Everything it
# started is stopped on exit, by PID.
#
# Usage: scripts/bench.sh [dq-bench flags]   e.g. scripts/bench.sh -quick
# Environment: GO (default go), BIN_DIR (default bin), REDIS_BENCH_REQUESTS
# (default 200000), SKIP_BUILD=1 uses the binaries already in BIN_DIR,
# KEEP_LOGS=1 keeps the temporary directory with the Redis and server logs,
# SERVER_GOMAXPROCS (default: the cores but one) the server's GOMAXPROCS.
set -euo pipefail

cd "$(dirname "$0")/.."

go_cmd=${GO:-go}
bin_dir=${BIN_DIR:-bin}
redis_bench_requests=${REDIS_BENCH_REQUESTS:-200000}
# The server holds one connection per held /pop (10,000 in the held-pops
# phase), and the tool as many on its side.
open_files=20000

for tool in "$go_cmd" redis-server redis-benchmark redis-cli; do
	if ! command -v "$tool" >/dev/null; then
		echo "bench: $tool not found in PATH (Debian: apt-get install redis-server redis-tools)" >&2
		exit 1
	fi
done

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
	echo "bench: building $bin_dir/delay-queue and $bin_dir/dq-bench" >&2
	"$go_cmd" build -o "$bin_dir/delay-queue" ./cmd/delay-queue
	"$go_cmd" build -o "$bin_dir/dq-bench" ./cmd/dq-bench
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/dq-bench.XXXXXX")
redis_pid=""
server_pid=""
floor_pid=""
bench_pid=""

# stop_pid ends one process we started and waits for it (at most 10 s,
# then SIGKILL).
stop_pid() {
	local pid=$1
	kill -TERM "$pid" 2>/dev/null || return 0
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	if [[ -n $bench_pid ]]; then stop_pid "$bench_pid"; fi
	if [[ -n $server_pid ]]; then stop_pid "$server_pid"; fi
	if [[ -n $floor_pid ]]; then stop_pid "$floor_pid"; fi
	if [[ -n $redis_pid ]]; then stop_pid "$redis_pid"; fi
	if [[ $status -ne 0 ]]; then
		echo "bench: failed (status $status); last lines of the logs:" >&2
		tail -n 20 "$work/server.log" "$work/redis.log" >&2 2>/dev/null || true
	fi
	if [[ ${KEEP_LOGS:-0} == 1 ]]; then
		echo "bench: logs kept in $work" >&2
	else
		rm -rf "$work"
	fi
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [[ $(ulimit -Hn) != unlimited && $(ulimit -Hn) -lt $open_files ]]; then
	echo "bench: the hard open-files limit is $(ulimit -Hn), below $open_files: held-pops may fail" >&2
	open_files=$(ulimit -Hn)
fi
ulimit -n "$open_files"

# wait_until runs a command until it succeeds, for up to 10 s.
wait_until() {
	local what=$1
	shift
	for _ in $(seq 200); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.05
	done
	echo "bench: $what did not come up within 10 s" >&2
	return 1
}

redis_port=$("$bin_dir/dq-bench" -free-port)
# Default settings, except no snapshots or AOF: the run must not be slowed
# by disk writes of a throwaway instance.
redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no \
	--dir "$work" --logfile "$work/redis.log" &
redis_pid=$!
wait_until "redis-server on port $redis_port" redis-cli -h 127.0.0.1 -p "$redis_port" ping

echo "bench: redis-benchmark -q -t set,lpop -n $redis_bench_requests -c 50 on port $redis_port" >&2
redis_bench_output=$(redis-benchmark -h 127.0.0.1 -p "$redis_port" -q -t set,lpop -n "$redis_bench_requests" -c 50 | tr '\r' '\n')
# Lines look like "SET: 126582.27 requests per second, p50=0.223 msec".
rate_of() {
	awk -v cmd="$1:" '$1 == cmd && $3 == "requests" { rate = $2 } END { print rate }' <<<"$redis_bench_output"
}
set_rps=$(rate_of SET)
lpop_rps=$(rate_of LPOP)
if [[ -z $set_rps ]]; then
	echo "bench: could not read the SET rate from redis-benchmark's output:" >&2
	echo "$redis_bench_output" >&2
	exit 1
fi
echo "redis-lpop $lpop_rps req/s"

server_port=$("$bin_dir/dq-bench" -free-port)
cat >"$work/delay-queue.conf" <<EOF
bind_address = 127.0.0.1:$server_port
redis.host = 127.0.0.1:$redis_port
redis.db = 1
; One log line per request at info would cost the server more than the work
; measured; production setups with this load log at warn too.
log_level = warn
EOF
# The server shares this machine with Redis and the load tool. Go runs one
# scheduler thread per core by default (GOMAXPROCS); next to Redis, which
# needs a core of its own, those threads' spinning and wake-ups cost more
# than they give (on 2 cores, 5-10% of push and pop-finish in A/B runs). So
# the server gets the cores but one, as a deployment that puts both on one
# machine would give it. SERVER_GOMAXPROCS overrides that (the core count
# is Go's default).
cores=$(getconf _NPROCESSORS_ONLN)
server_procs=${SERVER_GOMAXPROCS:-$((cores > 1 ? cores - 1 : 1))}
echo "bench: the server runs with GOMAXPROCS=$server_procs ($cores cores)" >&2
GOMAXPROCS=$server_procs "$bin_dir/delay-queue" -c "$work/delay-queue.conf" 2>"$work/server.log" &
server_pid=$!
server_url="http://127.0.0.1:$server_port"
# Any HTTP answer (the envelope's 404) means it is serving.
wait_until "delay-queue on port $server_port" \
	bash -c "exec 3<>/dev/tcp/127.0.0.1/$server_port"

# The http-floor phase's empty server: the same load on a server that does
# no queue work shows what HTTP itself costs on this machine.
floor_port=$("$bin_dir/dq-bench" -free-port)
"$bin_dir/dq-bench" -serve-floor "127.0.0.1:$floor_port" 2>"$work/floor.log" &
floor_pid=$!
wait_until "the http-floor server on port $floor_port" \
	bash -c "exec 3<>/dev/tcp/127.0.0.1/$floor_port"

# In the background, so that a signal to this script is handled at once
# (bash runs traps only between foreground commands, but interrupts wait).
"$bin_dir/dq-bench" -url "$server_url" -redis "127.0.0.1:$redis_port" -redis-db 1 \
	-set-rps "$set_rps" -server-pid "$server_pid" -floor-url "http://127.0.0.1:$floor_port" "$@" &
bench_pid=$!
bench_status=0
wait "$bench_pid" || bench_status=$?
bench_pid=""
exit "$bench_status"
