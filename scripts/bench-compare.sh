#!/usr/bin/env bash
# bench-compare.sh measures two or more server binaries against each other
# in rounds (make bench-compare): each round runs scripts/bench.sh once per
# binary, in an order rotated from round to round, and at the end it prints,
# for every figure, each binary's median and the median of the per-round
# ratios to the first binary.
#
# On a small shared machine the rate of everything drifts by a third within
# minutes, so two sets of runs taken one after the other compare the
# machine as much as the builds. Runs taken side by side in the same round
# see about the same machine: their ratio is the figure to read, and its
# range says how far to trust it.
#
# Usage: scripts/bench-compare.sh [-n ROUNDS] BIN [BIN...] [-- bench.sh flags]
#   e.g. scripts/bench-compare.sh -n 10 /tmp/old/bin/delay-queue bin/delay-queue \
#          -- -phases=lifecycle -lifecycle-jobs 10000
# The environment reaches scripts/bench.sh (CLUSTER, WRK, BUCKET_SIZE...).
# The load tool is built once into BIN_DIR (default bin) unless SKIP_BUILD=1;
# the binaries compared are taken as they are. REDIS_BENCH_REQUESTS defaults
# to 50000 here, a shorter reference run. The raw lines are kept in $OUT
# (default: a temporary file, named at the end), and what the runs printed
# on stderr in $OUT.err.
set -euo pipefail

cd "$(dirname "$0")/.."

rounds=5
if [[ ${1:-} == -n ]]; then
	rounds=$2
	shift 2
fi
bins=()
while (($# > 0)) && [[ $1 != -- ]]; do
	bins+=("$1")
	shift
done
if (($# > 0)); then
	shift
fi
if ((${#bins[@]} < 2)) || [[ ! $rounds =~ ^[1-9][0-9]*$ ]]; then
	echo "usage: scripts/bench-compare.sh [-n ROUNDS] BIN BIN [BIN...] [-- bench.sh flags]" >&2
	exit 2
fi
for b in "${bins[@]}"; do
	if [[ ! -x $b ]]; then
		echo "bench-compare: $b is not an executable" >&2
		exit 1
	fi
done
bin_dir=${BIN_DIR:-bin}
if [[ ${SKIP_BUILD:-0} != 1 ]]; then
	"${GO:-go}" build -o "$bin_dir/dq-bench" ./tools/dq-bench
fi
out=${OUT:-$(mktemp /tmp/bench-compare.XXXXXX)}
: >"$out"
: >"$out.err"

n=${#bins[@]}
for ((r = 1; r <= rounds; r++)); do
	for ((j = 0; j < n; j++)); do
		w=$(((r + j) % n))
		echo "bench-compare: round $r of $rounds: ${bins[$w]}" >&2
		# A failed run leaves its figures out; the ratios need both sides.
		SKIP_BUILD=1 BIN_DIR=$bin_dir SERVER_BIN=${bins[$w]} REDIS_BENCH_REQUESTS=${REDIS_BENCH_REQUESTS:-50000} \
			scripts/bench.sh "$@" 2>>"$out.err" | awk -v r="$r" -v w="$w" 'NF >= 2 && $2 ~ /^[0-9.]+$/ { print r, w, $1, $2, $3 }' >>"$out" ||
			echo "bench-compare: round $r: ${bins[$w]}: bench.sh failed (see $out.err)" >&2
	done
done

for ((j = 0; j < n; j++)); do
	echo "binary $j: ${bins[$j]}"
done
echo "figure: median per binary (0 1 ...), then per-round ratio to binary 0: median [min-max] over the rounds"
awk -v n="$n" '
function median(a, k,    i, j, t) {
	for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	return k % 2 ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}
function show(x) { return x >= 1000 ? sprintf("%.0f", x) : sprintf("%.4g", x) }
{
	v[$3, $1, $2] = $4; unit[$3] = $5
	if (!($3 in seen)) { seen[$3] = 1; names[++names_n] = $3 }
	if ($1 > maxr) maxr = $1
}
END {
	for (f = 1; f <= names_n; f++) {
		name = names[f]; line = sprintf("%-28s", name)
		for (b = 0; b < n; b++) {
			k = 0; delete a
			for (r = 1; r <= maxr; r++) if ((name, r, b) in v) a[++k] = v[name, r, b]
			line = line sprintf(" %10s", k ? show(median(a, k)) : "-")
		}
		line = line " " unit[name]
		for (b = 1; b < n; b++) {
			k = 0; delete a; lo = ""; hi = ""
			for (r = 1; r <= maxr; r++) {
				if (!((name, r, 0) in v) || !((name, r, b) in v) || v[name, r, 0] == 0) continue
				x = v[name, r, b] / v[name, r, 0]; a[++k] = x
				if (lo == "" || x < lo) lo = x
				if (hi == "" || x > hi) hi = x
			}
			if (k) line = line sprintf("  %d/0 %.3f [%.2f-%.2f] n=%d", b, median(a, k), lo, hi, k)
		}
		print line
	}
}' "$out"
echo "raw figures: $out (the runs' stderr: $out.err)"
