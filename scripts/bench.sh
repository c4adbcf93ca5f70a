#!/usr/bin/env bash
# bench.sh runs the performance benchmark (make bench): it builds the server
# and the load tool, starts a throwaway redis-server and the server on free
# loopback ports, measures redis-benchmark's SET and LPOP rates on that same
# Redis and the Redis CPU of a plain SET at 50 and at 4 clients (the
# phases' yardstick), then runs tools/dq-bench, which prints every figure as
# "name value unit", throughputs also as a ratio to SET req/s, and each
# phase's Redis CPU per job. Everything it started is stopped on exit, by
# PID.
#
# With CLUSTER=N (at least 3) it starts a Redis Cluster of N primaries and
# no replicas instead (cluster-enabled yes, formed with redis-cli --cluster
# create), and the server with redis.cluster_addrs and redis.db = 0;
# dq-bench then reads and empties every primary and prints each one's share
# of the Redis CPU. Replicas would only double Redis' CPU on a small machine
# and say nothing of the design. CLUSTER=1 is a cluster of one primary that
# holds every slot (CLUSTER ADDSLOTSRANGE): the server's and Redis' cluster
# code on one process, to tell what cluster mode costs from what the split
# over several processes costs.
#
# Usage: scripts/bench.sh [dq-bench flags]   e.g. scripts/bench.sh -quick
# Environment:
#   GO (default go), BIN_DIR (default bin)
#   SKIP_BUILD=1        use the binaries already in BIN_DIR
#   SERVER_BIN          the server binary to measure (default
#                       BIN_DIR/delay-queue), e.g. an older build's
#   CLUSTER=N           a cluster of N primaries (default 0: one Redis; 1: a
#                       cluster of one node holding every slot)
#   BUCKET_SIZE=N       the server's bucket_size, its partitions (default
#                       unset: the server's default, 3, or 12 on a cluster)
#   REDIS_BENCH_REQUESTS  redis-benchmark's requests (default 200000)
#   SERVER_GOMAXPROCS   the server's GOMAXPROCS (default: the cores but one)
#   DEBUG_ADDR          the server's debug_addr (pprof), default none
#   KEEP_LOGS=1         keep the temporary directory with the logs
#   WRK=1               after dq-bench, cross-check push and pop-finish with
#                       wrk (scripts/wrk): WRK_PUSH_SECONDS (default 10) of
#                       pushes, then WRK_POP_SECONDS (default 5) of pops and
#                       finishes, on WRK_CONNECTIONS (default 32)
set -euo pipefail

cd "$(dirname "$0")/.."

go_cmd=${GO:-go}
bin_dir=${BIN_DIR:-bin}
redis_bench_requests=${REDIS_BENCH_REQUESTS:-200000}
cluster_size=${CLUSTER:-0}
server_bin=${SERVER_BIN:-$bin_dir/delay-queue}
use_wrk=${WRK:-0}
# The server holds one connection per held /pop (10,000 in the held-pops
# phase), and the tool as many on its side.
open_files=20000

if [[ ! $cluster_size =~ ^[0-9]+$ ]] || ((cluster_size == 2)); then
	echo "bench: CLUSTER=$cluster_size: redis-cli --cluster create needs at least 3 primaries (0: one standalone Redis; 1: a cluster of one node)" >&2
	exit 1
fi
for tool in "$go_cmd" redis-server redis-benchmark redis-cli; do
	if ! command -v "$tool" >/dev/null; then
		echo "bench: $tool not found in PATH (Debian: apt-get install redis-server redis-tools)" >&2
		exit 1
	fi
done
if [[ $use_wrk == 1 ]] && ! command -v wrk >/dev/null; then
	echo "bench: WRK=1 but wrk is not in PATH (Debian: apt-get install wrk)" >&2
	exit 1
fi

if [[ ${SKIP_BUILD:-0} != 1 ]]; then
	echo "bench: building $bin_dir/delay-queue and $bin_dir/dq-bench" >&2
	"$go_cmd" build -o "$bin_dir/delay-queue" ./cmd/delay-queue
	"$go_cmd" build -o "$bin_dir/dq-bench" ./tools/dq-bench
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/dq-bench.XXXXXX")
redis_pids=()
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
	local status=$? pid
	trap - EXIT INT TERM
	if [[ -n $bench_pid ]]; then stop_pid "$bench_pid"; fi
	if [[ -n $server_pid ]]; then stop_pid "$server_pid"; fi
	if [[ -n $floor_pid ]]; then stop_pid "$floor_pid"; fi
	for pid in "${redis_pids[@]}"; do stop_pid "$pid"; done
	if [[ $status -ne 0 ]]; then
		echo "bench: failed (status $status); last lines of the logs:" >&2
		tail -n 20 "$work/server.log" "$work"/redis*.log >&2 2>/dev/null || true
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

# start_redis starts a redis-server named name on a free port with more
# settings, and adds its address to redis_addrs. Default settings, except
# no snapshots or AOF: the run must not be slowed by disk writes of a
# throwaway instance.
start_redis() {
	local name=$1 port
	shift
	port=$("$bin_dir/dq-bench" -free-port)
	mkdir -p "$work/$name"
	redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
		--dir "$work/$name" --logfile "$work/$name.log" "$@" &
	redis_pids+=($!)
	wait_until "redis-server on port $port" redis-cli -h 127.0.0.1 -p "$port" ping
	redis_addrs+=("127.0.0.1:$port")
}

# cluster_ok reports whether every node says cluster_state:ok.
cluster_ok() {
	local addr
	for addr in "${redis_addrs[@]}"; do
		redis-cli -h 127.0.0.1 -p "${addr##*:}" cluster info | grep -q '^cluster_state:ok' || return 1
	done
}

redis_addrs=()
if ((cluster_size == 0)); then
	start_redis redis
	redis_db=1
	redis_bench_mode=()
else
	for n in $(seq "$cluster_size"); do
		# The bus port is chosen too, not left at port+10000, which may be
		# taken or beyond 65535.
		start_redis "redis$n" --cluster-enabled yes --cluster-config-file nodes.conf \
			--cluster-port "$("$bin_dir/dq-bench" -free-port)"
	done
	if ((cluster_size == 1)); then
		echo "bench: a cluster of one node, ${redis_addrs[0]}, holding every slot" >&2
		redis-cli -h 127.0.0.1 -p "${redis_addrs[0]##*:}" cluster addslotsrange 0 16383 >"$work/cluster-create.log"
		# redis-benchmark --cluster refuses a cluster of one node, which
		# serves every key itself anyway.
		redis_bench_mode=()
	else
		echo "bench: forming a cluster of ${redis_addrs[*]} without replicas" >&2
		redis-cli --cluster create "${redis_addrs[@]}" --cluster-replicas 0 --cluster-yes >"$work/cluster-create.log"
		redis_bench_mode=(--cluster)
	fi
	wait_until "the cluster (cluster_state:ok on every node)" cluster_ok
	redis_db=0
fi
redis_port=${redis_addrs[0]##*:}

echo "bench: redis-benchmark ${redis_bench_mode[*]} -q -t set,lpop -n $redis_bench_requests -c 50 on port $redis_port" >&2
redis_bench_output=$(redis-benchmark "${redis_bench_mode[@]}" -h 127.0.0.1 -p "$redis_port" -q -t set,lpop \
	-n "$redis_bench_requests" -c 50 | tr '\r' '\n')
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

# redis_cpu_seconds is used_cpu_user + used_cpu_sys summed over the
# primaries, as dq-bench reads them for its phases.
redis_cpu_seconds() {
	"$bin_dir/dq-bench" -redis "${redis_addrs[0]}" -redis-db "$redis_db" -redis-cpu
}

# The Redis CPU of a plain SET, over every primary (random keys, so that on
# a cluster they spread over the slots as the server's partitions do), at
# 50 clients and at 4. It is the yardstick for the phases' Redis CPU per
# job in the same run: how much a request costs depends on how many arrive
# together (a wake-up of Redis' event loop serves all that have come), and
# a cluster splits what arrives over its primaries, so at the few calls in
# flight that a server keeps per primary the same SET costs a cluster more
# per request than one Redis.
for clients in 50 4; do
	before=$(redis_cpu_seconds)
	redis-benchmark "${redis_bench_mode[@]}" -h 127.0.0.1 -p "$redis_port" -q -t set -r 1000000 \
		-n "$redis_bench_requests" -c "$clients" >/dev/null
	after=$(redis_cpu_seconds)
	awk -v b="$before" -v a="$after" -v n="$redis_bench_requests" -v c="$clients" \
		'BEGIN { printf "redis-set-cpu-c%d %.2f us/req\n", c, (a - b) / n * 1e6 }'
done
for addr in "${redis_addrs[@]}"; do
	redis-cli -h 127.0.0.1 -p "${addr##*:}" flushall >/dev/null
done

server_port=$("$bin_dir/dq-bench" -free-port)
if ((cluster_size == 0)); then
	redis_setting="redis.host = ${redis_addrs[0]}"
else
	redis_setting="redis.cluster_addrs = $(IFS=, && echo "${redis_addrs[*]}")"
fi
cat >"$work/delay-queue.conf" <<EOF
bind_address = 127.0.0.1:$server_port
$redis_setting
redis.db = $redis_db
; One log line per request at info would cost the server more than the work
; measured; production setups with this load log at warn too.
log_level = warn
EOF
if [[ -n ${BUCKET_SIZE:-} ]]; then
	echo "bucket_size = $BUCKET_SIZE" >>"$work/delay-queue.conf"
fi
if [[ -n ${DEBUG_ADDR:-} ]]; then
	echo "debug_addr = $DEBUG_ADDR" >>"$work/delay-queue.conf"
fi
# The server shares this machine with Redis and the load tool. Go runs one
# scheduler thread per core by default (GOMAXPROCS); next to Redis, which
# needs a core of its own, those threads' spinning and wake-ups cost more
# than they give (on 2 cores, 5-10% of push and pop-finish in A/B runs). So
# the server gets the cores but one, as a deployment that puts both on one
# machine would give it. SERVER_GOMAXPROCS overrides that (the core count
# is Go's default).
cores=$(getconf _NPROCESSORS_ONLN)
server_procs=${SERVER_GOMAXPROCS:-$((cores > 1 ? cores - 1 : 1))}
echo "bench: $server_bin runs with GOMAXPROCS=$server_procs ($cores cores)" >&2
GOMAXPROCS=$server_procs "$server_bin" -c "$work/delay-queue.conf" 2>"$work/server.log" &
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
"$bin_dir/dq-bench" -url "$server_url" -redis "${redis_addrs[0]}" -redis-db "$redis_db" \
	-set-rps "$set_rps" -server-pid "$server_pid" -floor-url "http://127.0.0.1:$floor_port" "$@" &
bench_pid=$!
bench_status=0
wait "$bench_pid" || bench_status=$?
bench_pid=""
if [[ $use_wrk != 1 ]]; then
	exit "$bench_status"
fi

# run_wrk runs wrk with a script of scripts/wrk for some seconds and prints
# the rate the script reports as "name rate unit ratio=r" (r: to SET
# req/s); it fails when an answer was not code 0 or a pop found the topic
# empty, which would make the rate a figure of something else.
run_wrk() {
	local name=$1 script=$2 seconds=$3 out failed empty rate
	out=$(wrk -t1 -c "${WRK_CONNECTIONS:-32}" -d "${seconds}s" -s "scripts/wrk/$script" "$server_url")
	echo "$out" >>"$work/wrk.log"
	failed=$(awk '$1 == "wrk-failed" { print $2 }' <<<"$out")
	empty=$(awk '$1 == "wrk-empty" { print $2 }' <<<"$out")
	rate=$(awk '$1 == "wrk-rate" { print $2 }' <<<"$out")
	if [[ -z $rate || ${failed:-1} != 0 || ${empty:-0} != 0 ]]; then
		echo "bench: $name: ${failed:-?} answers not code 0, ${empty:-0} empty pops:" >&2
		echo "$out" >&2
		return 1
	fi
	awk -v name="$name" -v rate="$rate" -v set="$set_rps" \
		'BEGIN { printf "%s %.0f jobs/s ratio=%.3f\n", name, rate, rate / set }'
}

# wrk's push run fills the topic its pop-finish run then drains in part, so
# they start from an empty db. This drops the server's layout record too,
# which it only reads at start-up.
for addr in "${redis_addrs[@]}"; do
	redis-cli -h 127.0.0.1 -p "${addr##*:}" -n "$redis_db" flushdb >/dev/null
done
echo "bench: wrk: ${WRK_PUSH_SECONDS:-10} s of pushes, then ${WRK_POP_SECONDS:-5} s of pops and finishes" >&2
run_wrk wrk-push push.lua "${WRK_PUSH_SECONDS:-10}"
run_wrk wrk-pop-finish pop-finish.lua "${WRK_POP_SECONDS:-5}"
exit "$bench_status"
