#!/usr/bin/env bash
# module_link_test (ctest): the static libraries' symbol graph against libcommon/modules.cmake.
#   rtx_check_links.sh NM MODULES_CMAKE LIBDIR
# Each rtx_<m> target links exactly its RTX_DEPS_<m> row (by construction in
# libcommon/CMakeLists.txt, checked there at configure time), but a static library does not
# fail to link when it calls UP the table: the linker may find the symbol in an archive it
# scans anyway. So this test reads the archives: every undefined symbol of librtx_<m>.a that
# another module's archive defines (T/D/B/R/G, not weak) must come from a module in the
# transitive closure of <m>'s row; each violation is printed as "m -> d: symbol" and it fails.
# RTX_LINK_DROP="m:d" (its self-test) reads the table as if d were not in m's row.
set -euo pipefail
nm_tool=$1 modules=$2 libdir=$3
order=$(sed -n 's/^set(RTX_MODULES \(.*\))/\1/p' "$modules")
[ -n "$order" ] || { echo "no RTX_MODULES in $modules" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in $order; do
  lib="$libdir/librtx_$m.a"
  [ -f "$lib" ] || { echo "missing $lib (build libcommon first)" >&2; exit 2; }
  "$nm_tool" -g "$lib" 2>/dev/null | awk -v m="$m" '
    NF == 3 && $2 ~ /^[TDBRG]$/ { print "D", m, $3 }
    NF == 2 && $1 == "U" { print "U", m, $2 }' >> "$tmp/syms"
done
sed -n 's/^set(RTX_DEPS_\([a-z_]*\) *\(.*\))/\1 \2/p' "$modules" | tr -d '"' |
  awk -v drop="${RTX_LINK_DROP:-}" 'BEGIN { split(drop, x, ":") }
    { if ($1 == x[1]) { line = $1; for (i = 2; i <= NF; i++) if ($i != x[2]) line = line " " $i; print line } else print }' > "$tmp/deps"
awk '
  FILENAME == ARGV[1] { deps[$1] = ""; for (i = 2; i <= NF; i++) deps[$1] = deps[$1] " " $i; next }
  $1 == "D" { if (!($3 in def)) def[$3] = $2; next }
  $1 == "U" { und[++n] = $2 " " $3; next }
  function closure(m,   seen, stack, top, d, i, k, parts) {
    if (m in memo) return memo[m]
    top = 0; stack[++top] = m; seen[m] = 1
    while (top > 0) {
      d = stack[top--]; k = split(deps[d], parts, " ")
      for (i = 1; i <= k; i++) if (!(parts[i] in seen)) { seen[parts[i]] = 1; stack[++top] = parts[i] }
    }
    memo[m] = " "; for (d in seen) memo[m] = memo[m] d " "
    return memo[m]
  }
  END {
    bad = 0
    for (i = 1; i <= n; i++) {
      split(und[i], p, " "); m = p[1]; s = p[2]
      if (!(s in def)) continue
      d = def[s]
      if (d == m || index(closure(m), " " d " ") > 0) continue
      if (!((m, d, s) in said)) { said[m, d, s] = 1; print m " -> " d ": " s; bad++ }
    }
    if (bad > 0) { print "module_link_test: " bad " call(s) up the module table (see libcommon/modules.cmake)"; exit 1 }
    print "module_link_test: every cross-module symbol of the rtx_<m> archives is defined below its user"
  }' "$tmp/deps" "$tmp/syms"
