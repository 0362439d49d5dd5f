#!/usr/bin/env bash
# Builds the libFuzzer targets (if needed) and runs each for SECONDS:
#   tests/fuzz/run.sh [-j JOBS] SECONDS [TARGET...]
# Every target runs under ASan + UBSan with leak checks, from the seeds in
# tests/fuzz/corpus/<target>/ plus what earlier runs found (kept in
# $FUZZ_BUILD_DIR/corpus/<target>/, never in the repository), with its
# dictionary tests/fuzz/<target>.dict when there is one.  Prints a table of
# executions and coverage (cov: edges, ft: features, from libFuzzer's final
# stats) per target, then the same as one JSON line, and exits non-zero if any target found a crash, leak,
# sanitizer report or timeout; the input is saved as
# tests/fuzz/crashes/<target>/<kind>-<sha1> (reproduce: run the target's
# binary on that file).  JOBS targets run at once (default 1).
# The build dir ($FUZZ_BUILD_DIR, default build-fuzz) is configured with
#   CC=clang-14 meson setup build-fuzz -Dfuzz=true -Dcuda=disabled \
#     -Db_sanitize=address,undefined -Db_lundef=false
# The tiny model seeds in corpus/gguf/ were written by
#   sinkd-mkmodel --vocab-size 259 --dim 4 --layers 1 --heads 2 --ffn 8 --context 32
#   sinkd-mkmodel --vocab-size 259 --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 32 \
#     --type q8_0 --tied --context 32
# and the other GGUF seeds by gen-gguf-seeds.py.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

jobs=1
if [ "${1:-}" = "-j" ]; then
	jobs=${2:?-j needs a number}
	shift 2
fi
secs=${1:-}
if ! [[ "$secs" =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
	echo "usage: tests/fuzz/run.sh [-j JOBS] SECONDS [TARGET...]" >&2
	exit 2
fi
shift
all_targets=(request config gguf tokenizer detok stopstr snapshot jinja output)
targets=("$@")
[ "${#targets[@]}" -gt 0 ] || targets=("${all_targets[@]}")

# Longest input per target: large enough for its seeds, small enough that
# one input runs in milliseconds.
max_len() {
	case $1 in
	gguf | snapshot) echo 65536 ;;
	config) echo 16384 ;;
	jinja) echo 20480 ;;
	request) echo 8192 ;;
	detok) echo 6144 ;;
	*) echo 4096 ;;
	esac
}

build=${FUZZ_BUILD_DIR:-build-fuzz}
export SINKD_SHARED=${SINKD_SHARED:-$root/../shared}
if [ ! -f "$build/build.ninja" ]; then
	mkdir -p "$build"
	CC=clang-14 meson setup "$build" -Dfuzz=true -Dcuda=disabled -Dwerror=true \
		-Db_sanitize=address,undefined -Db_lundef=false --buildtype=debugoptimized \
		>"$build/setup.log" 2>&1 || {
		cat "$build/setup.log" >&2
		exit 1
	}
fi
ninja -C "$build" fuzz >"$build/fuzz-build.log" 2>&1 || {
	cat "$build/fuzz-build.log" >&2
	exit 1
}

logs=$build/fuzz-logs
mkdir -p "$logs"
# libFuzzer reports leaks itself; UBSan already aborts (-fno-sanitize-recover).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}

run_target() { # target
	local t=$1 bin=$build/tests/fuzz/fuzz-$1
	local work=$build/corpus/$t crashes=tests/fuzz/crashes/$t dict=()
	mkdir -p "$work" "$crashes"
	[ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len="$(max_len "$t")" \
		-print_final_stats=1 -artifact_prefix="$crashes/" "${dict[@]}" \
		"$work" "tests/fuzz/corpus/$t" >"$logs/$t.log" 2>&1
	echo $? >"$logs/$t.rc"
	rmdir "$crashes" tests/fuzz/crashes 2>/dev/null # kept only when they hold an input
}

for t in "${targets[@]}"; do
	if [ ! -x "$build/tests/fuzz/fuzz-$t" ]; then
		echo "tests/fuzz/run.sh: no target '$t' (targets: ${all_targets[*]})" >&2
		exit 2
	fi
	rm -f "$logs/$t.rc"
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	run_target "$t" &
done
wait

failed=0
json=""
printf '%-10s %8s %12s %9s %7s %7s %7s  %s\n' target seconds execs exec/s cov ft corpus result
for t in "${targets[@]}"; do
	log=$logs/$t.log
	rc=$(cat "$logs/$t.rc" 2>/dev/null || echo 1)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	last=$(grep -E '^#[0-9]+' "$log" | tail -1)
	cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
	ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
	corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$last")
	result=ok
	if [ "$rc" -ne 0 ]; then
		failed=1
		art=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
		kind=$(grep -m1 -oE 'ERROR: [A-Za-z]+: [a-z -]+|runtime error: [^:]*' "$log")
		result="FAILED (rc $rc: ${kind:-see $log}${art:+; input $art})"
	fi
	printf '%-10s %8s %12s %9s %7s %7s %7s  %s\n' "$t" "$secs" "${execs:-?}" "${rate:-?}" \
		"${cov:-?}" "${ft:-?}" "${corp:-?}" "$result"
	json+="${json:+,}{\"target\":\"$t\",\"seconds\":$secs,\"execs\":${execs:-null},"
	json+="\"cov\":${cov:-null},\"ft\":${ft:-null},\"result\":\"$([ "$result" = ok ] && echo ok || echo failed)\"}"
done
echo "{\"fuzz\":[$json]}"
if [ "$failed" -ne 0 ]; then
	echo "tests/fuzz/run.sh: a target failed; its log is in $logs/" >&2
	for t in "${targets[@]}"; do
		if [ "$(cat "$logs/$t.rc" 2>/dev/null || echo 1)" -ne 0 ]; then
			echo "---- $t (last lines of $logs/$t.log)" >&2
			grep -v '^#[0-9]' "$logs/$t.log" | tail -40 >&2
		fi
	done
fi
exit "$failed"
