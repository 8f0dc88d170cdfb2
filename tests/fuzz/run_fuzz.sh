#!/usr/bin/env bash
# Run every libFuzzer target of build-fuzz/ for SECONDS each over its committed seed corpus
# (tests/fuzz/corpus/<target>/, read only) plus a working corpus in the build folder, where
# new inputs go. Crashes are written to <build>/fuzz/crashes/. Exit 1 if any target failed.
# Usage: tests/fuzz/run_fuzz.sh BUILD_DIR SECONDS [TARGET...]   (`make fuzz` calls it)
set -uo pipefail
build=${1:?build dir}; seconds=${2:?seconds}; shift 2
src="$(cd "$(dirname "$0")" && pwd)"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then  # every target of tests/fuzz/targets.cmake
  read -r -a targets <<<"$(sed -n '/^set(RTX_FUZZ_TARGETS/,/)/p' "$src/targets.cmake" | tr -d '()' | sed 's/set//; s/RTX_FUZZ_TARGETS//' | tr '\n' ' ')"
fi
# LeakSanitizer's scan of dynamic TLS crashes on glibc 2.36 once NVIDIA libraries with TLS were
# dlopen'ed (hardware probing); leaks are still checked.
export ASAN_OPTIONS="${ASAN_OPTIONS:-intercept_tls_get_addr=0}"
mkdir -p "$build/fuzz/crashes"
failed=()
for t in "${targets[@]}"; do
  work="$build/fuzz/corpus-work/$t"
  mkdir -p "$work"
  log="$build/fuzz/$t.log"
  echo "fuzz: $t for ${seconds} s"
  "$build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$build/fuzz/crashes/$t-" "$work" "$src/corpus/$t" >"$log" 2>&1
  rc=$?
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$log" | awk '{print $2}' | tail -1)
  echo "fuzz: $t: exit $rc, ${execs:-?} executions (log $log)"
  if [ $rc -ne 0 ]; then
    failed+=("$t")
    grep -m5 -E 'ERROR|invariant|terminate|SUMMARY' "$log" || tail -20 "$log"
  fi
done
if [ ${#failed[@]} -ne 0 ]; then
  echo "fuzz: FAILED: ${failed[*]} (inputs in $build/fuzz/crashes/)"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds} s without a crash"
