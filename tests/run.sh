#!/usr/bin/env bash
# Builds sinkd and runs its tests on this machine.  Installs the missing
# Debian packages first (deploy/install-deps.sh --tests: the test tools too).
#   tests/run.sh                  the whole suite, what CI runs: unit and
#                                 integration tests (warnings as errors), then
#                                 again under AddressSanitizer + UBSan, the
#                                 threaded parts under ThreadSanitizer, and a
#                                 fuzz smoke
#   tests/run.sh --quick          unit and integration tests in build-test
#                                 less the suite slow; no sanitizers, no fuzz
#   tests/run.sh --quick WORD...  only the tests whose name or a suite contains
#                                 a WORD (slow ones included), e.g. session
#   tests/run.sh --quick --suite NAME ...  meson test's --suite/--no-suite
# Ends with a line "N passed, N failed, N skipped".  CUDA tests skip (77)
# without a GPU.
set -uo pipefail
cd "$(dirname "$0")/.."

quick=0
words=()
suite_args=()
while [ "$#" -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--suite | --no-suite)
		[ "$#" -ge 2 ] || { echo "tests/run.sh: $1 needs a suite name" >&2; exit 2; }
		suite_args+=("$1" "$2")
		shift
		;;
	-*)
		echo "usage: tests/run.sh [--quick [WORD...] [--suite NAME] [--no-suite NAME]]" >&2
		exit 2
		;;
	*) words+=("$1") ;;
	esac
	shift
done
if [ "$quick" -eq 0 ] && [ "$((${#words[@]} + ${#suite_args[@]}))" -gt 0 ]; then
	echo "tests/run.sh: a filter needs --quick (the full run is always the whole suite)" >&2
	exit 2
fi

deploy/install-deps.sh --tests || exit 1
export PATH="/usr/local/cuda/bin:$PATH"

passed=0 failed=0 skipped=0
failed_names=""
failed_checks=""
run_suite() { # build-dir, meson test args...
	local dir=$1
	shift
	meson test -C "$dir" --print-errorlogs --num-processes 2 "$@" 2>&1 | tee "$dir/test-output.txt"
	local summary
	summary=$(sed -n 's/^\(Ok\|Fail\|Skipped\|Expected Fail\|Unexpected Pass\|Timeout\): *\([0-9]*\).*/\1 \2/p' "$dir/test-output.txt")
	local ok fail skip xfail upass tout
	ok=$(awk '$1=="Ok"{print $2}' <<<"$summary")
	fail=$(awk '$1=="Fail"{print $2}' <<<"$summary")
	skip=$(awk '$1=="Skipped"{print $2}' <<<"$summary")
	tout=$(awk '$1=="Timeout"{print $2}' <<<"$summary")
	upass=$(awk '$1=="Unexpected"{print $3}' <<<"$summary")
	xfail=$(awk '$1=="Expected"{print $3}' <<<"$summary")
	if [ -z "$ok" ]; then
		echo "tests/run.sh: meson test printed no summary in $dir" >&2
		failed=$((failed + 1))
		return
	fi
	# The names go at the end too, where a truncated CI log still shows them.
	failed_names+=$(sed -n 's/^ *[0-9]*\/[0-9]* \(.*[^ ]\) *\(FAIL\|TIMEOUT\|UNEXPECTEDPASS\) .*/ \1/p' \
		"$dir/test-output.txt" | tr -s ' ' | tr '\n' ',')
	local checks
	# with the detail line a check prints under itself (indented or "#")
	checks=$(awk '/^(not ok|Bail out)/ { print; d = 1; next }
		d && /^( |\t|#)/ { print; d = 0; next } { d = 0 }' "$dir/test-output.txt" | head -n 40 |
		cut -c1-300 | sed "s|^|  $dir: |")
	[ -n "$checks" ] && failed_checks+="$checks"$'\n'
	passed=$((passed + ok + ${xfail:-0}))
	failed=$((failed + ${fail:-0} + ${tout:-0} + ${upass:-0}))
	skipped=$((skipped + ${skip:-0}))
}

configure() { # build-dir, meson options...
	local dir=$1
	shift
	if [ ! -f "$dir/build.ninja" ]; then
		mkdir -p "$dir"
		meson setup "$dir" "$@" >"$dir/setup.log" 2>&1 || { cat "$dir/setup.log"; return 1; }
	fi
	ninja -C "$dir" || return 1
}

# --quick's selection: meson test's arguments for the tests of build-test
# whose name or one of whose suites contains one of the words (names from
# `meson test --list`: "sinkd:unit+tsan / session-store"), or, without words,
# the --suite/--no-suite given, less the suite slow unless a --suite names
# what to run.
quick_args() {
	if [ "${#words[@]}" -eq 0 ]; then
		[ "${#suite_args[@]}" -eq 0 ] || printf '%s\n' "${suite_args[@]}"
		[[ " ${suite_args[*]} " == *" --suite "* ]] || printf '%s\n' --no-suite slow
		return
	fi
	meson test -C build-test --list "${suite_args[@]}" 2>/dev/null |
		awk -v words="${words[*]}" '
			/ \/ / { split($0, f, " / "); name = f[2]; n = split(words, w, " ")
				for (i = 1; i <= n; i++) if (index(f[1], w[i]) || index(name, w[i])) { print name; next } }'
}

if configure build-test -Dwerror=true --buildtype=debugoptimized; then
	if [ "$quick" -eq 1 ]; then
		mapfile -t selection < <(quick_args)
		if [ "${#selection[@]}" -eq 0 ]; then
			echo "tests/run.sh: no test's name or suite contains: ${words[*]}" >&2
			exit 2
		fi
		run_suite build-test "${selection[@]}"
	else
		run_suite build-test
	fi
else
	echo "tests/run.sh: the build failed" >&2
	failed=$((failed + 1))
fi

if [ "$quick" -eq 1 ]; then
	[ -n "$failed_checks" ] && printf 'failed checks:\n%s' "$failed_checks"
	[ -n "$failed_names" ] && echo "failed:${failed_names%,}"
	echo "${passed} passed, ${failed} failed, ${skipped} skipped"
	[ "$failed" -eq 0 ]
	exit
fi

# The whole suite again under AddressSanitizer + UBSan with leak checks (no
# CUDA: nvcc objects are not instrumented), less the tests of deploy files and
# balancers (suite no-sanitize: they exercise nginx, HAProxy and systemd, and
# the daemon's side of them runs here in the other tests).
if configure build-asan -Dwerror=true -Dcuda=disabled -Db_sanitize=address,undefined \
	--buildtype=debugoptimized; then
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		run_suite build-asan --no-suite no-sanitize
else
	echo "tests/run.sh: the sanitizer build failed" >&2
	failed=$((failed + 1))
fi

# The threaded parts (scheduler, thread pool, server, reload and drain;
# suite tsan) under ThreadSanitizer: a reported race fails the test.
if configure build-tsan -Dwerror=true -Dcuda=disabled -Db_sanitize=thread \
	--buildtype=debugoptimized; then
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 SINKD_TEST_TIME_SCALE=10 \
		run_suite build-tsan --suite tsan --timeout-multiplier 3
else
	echo "tests/run.sh: the thread-sanitizer build failed" >&2
	failed=$((failed + 1))
fi

# ---- Fuzz smoke: every libFuzzer target of tests/fuzz for a short run
# (SINKD_FUZZ_SECONDS each, two at a time) under ASan + UBSan from its seed
# corpus; each target counts as one check.  Longer runs are by hand:
# tests/fuzz/run.sh SECONDS.
fuzz_out=$(mktemp)
tests/fuzz/run.sh -j 2 "${SINKD_FUZZ_SECONDS:-20}" 2>&1 | tee "$fuzz_out"
fuzz_json=$(grep '^{"fuzz":' "$fuzz_out" | tail -1)
fuzz_ok=$(grep -o '"result":"ok"' <<<"$fuzz_json" | wc -l)
fuzz_bad=$(grep -o '"result":"failed"' <<<"$fuzz_json" | wc -l)
if [ "$((fuzz_ok + fuzz_bad))" -eq 0 ]; then
	echo "tests/run.sh: the fuzz smoke printed no results (build failed?)" >&2
	fuzz_bad=1
fi
passed=$((passed + fuzz_ok))
failed=$((failed + fuzz_bad))
rm -f "$fuzz_out"

[ -n "$failed_checks" ] && printf 'failed checks:\n%s' "$failed_checks"
[ -n "$failed_names" ] && echo "failed:${failed_names%,}"
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
[ "$failed" -eq 0 ]
