#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/build.sh — builds the example recipe recipes/debian-pytorch.yaml (two
# cells, ~500 Debian packages each, 1.4 and 1.9 GiB roots) with strata and
# produces the same roots the way people do without it, side by side:
#
#   strata build (cold)     the whole matrix into a fresh store
#   strata build (warm)     the same again: every layer cached
#   dpkg-deb pipeline       per cell: `dpkg-deb -x` of every package in layer
#                           order, the dpkg status, the recipe's run steps in
#                           bubblewrap, then tar | zstd -3 -T0 (the same root)
#   dpkg-deb -x + tar|zstd  per cell: the packages only (no status, no run
#                           steps), for reference
#
# then exports both images from the strata store, checks that they are the
# roots the pipeline made (paths, types, modes, owners, sizes, symlink
# targets, contents; .pyc contents excepted: they record source mtimes, which
# strata normalises), packs each exported root with tar | zstd -3 -T0, and
# compares the store's bytes with the .deb files and with those archives.
#
# Environment:
#   BENCH_WORK        work dir, default /var/tmp/strata-bench-build (outside the repo)
#   STRATA            strata binary; default: build-bench/ in the repo, built
#                     (meson --buildtype=release) or brought up to date with ninja
#   BENCH_REV         instead, build this commit (git archive into
#                     $BENCH_WORK/src/, outside the work tree) and bench it
#   STRATA_FIXTURES   .deb cache, default /var/cache/strata-fixtures
#   BENCH_REPEAT      timed runs of each build, default 1 (a cold build takes
#                     minutes); tables show the fastest, every run is listed
#
# Needs root (bubblewrap run steps, roots owned by root; apt-get for missing
# tools). Figures are printed as a table at the end and kept in
# $BENCH_WORK/run/results.txt.
set -euo pipefail
export LC_ALL=C

prog=bench/build.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(dirname "$here")
. "$here/lib.sh"
fixtures=$repo/tests/fixtures
recipe=$repo/recipes/debian-pytorch.yaml
cells=(no yes) # the recipe's matrix axis "scipy", in its order
image=debian-pytorch
tag_of() { echo "1.13-scipy-$1"; }

# The recipe's run steps, per layer, for the pipeline. Keep in step with
# recipes/debian-pytorch.yaml; the root comparison below fails if they drift.
base_runs=(
  "cp /usr/share/base-passwd/passwd.master /etc/passwd && cp /usr/share/base-passwd/group.master /etc/group"
  "update-alternatives --log /dev/null --install /usr/bin/awk awk /usr/bin/mawk 5"
  "update-alternatives --log /dev/null --install /usr/bin/which which /usr/bin/which.debianutils 0"
  "ldconfig && rm -f /var/cache/ldconfig/aux-cache"
  "PYTHONHASHSEED=0 python3 -m compileall -q /usr/lib/python3.11 /usr/lib/python3/dist-packages"
)
framework_runs=(
  "update-alternatives --log /dev/null --install /usr/lib/x86_64-linux-gnu/libblas.so.3 libblas.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/blas/libblas.so.3 10"
  "update-alternatives --log /dev/null --install /usr/lib/x86_64-linux-gnu/liblapack.so.3 liblapack.so.3-x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/lapack/liblapack.so.3 10"
  "ldconfig && rm -f /var/cache/ldconfig/aux-cache"
  "PYTHONHASHSEED=0 python3 -m compileall -q /usr/lib/python3.11 /usr/lib/python3/dist-packages"
)
tools_runs=(
  "d=/usr/lib/x86_64-linux-gnu; if [ -e \$d/openblas-pthread/libblas.so.3 ]; then update-alternatives --log /dev/null --install \$d/libblas.so.3 libblas.so.3-x86_64-linux-gnu \$d/openblas-pthread/libblas.so.3 100 && update-alternatives --log /dev/null --install \$d/liblapack.so.3 liblapack.so.3-x86_64-linux-gnu \$d/openblas-pthread/liblapack.so.3 100 && update-alternatives --log /dev/null --install \$d/libopenblas.so.0 libopenblas.so.0-x86_64-linux-gnu \$d/openblas-pthread/libopenblas.so.0 100; fi"
  "ldconfig && rm -f /var/cache/ldconfig/aux-cache"
  "PYTHONHASHSEED=0 python3 -m compileall -q /usr/lib/python3.11 /usr/lib/python3/dist-packages"
)
# the image's config.env, which run steps see
run_env=(PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG C.UTF-8 HOME /root)

# --- work dir --------------------------------------------------------------
bench_work_dir /var/tmp/strata-bench-build

# --- tools -----------------------------------------------------------------
step "tools"
bench_tools "bubblewrap run steps, roots owned by root" bwrap:bubblewrap zstd:zstd tar:tar \
  dpkg-deb:dpkg apt-get:apt diff:diffutils flock:util-linux sha256sum:coreutils
bench_strata
unset SOURCE_DATE_EPOCH
say "$(zstd --version); $(tar --version | head -1); $(dpkg-deb --version | head -1); bwrap $(bwrap --version | cut -d' ' -f2)"

repeat=${BENCH_REPEAT:-1}
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPEAT must be a positive number, not '$repeat'"

# --- fixtures --------------------------------------------------------------
step "fixtures: tests/fixtures/fetch-pytorch-debs.sh"
debs=$("$fixtures/fetch-pytorch-debs.sh")
layer_dirs() { echo "$debs/pytorch-base $debs/pytorch-framework $debs/pytorch-tools-scipy-$1"; }
declare -A DEB_BYTES DEB_COUNT
for c in "${cells[@]}"; do
  # shellcheck disable=SC2046
  DEB_BYTES[$c]=$(file_bytes $(layer_dirs "$c"))
  # shellcheck disable=SC2046
  DEB_COUNT[$c]=$(find $(layer_dirs "$c") -maxdepth 1 -name '*.deb' | wc -l)
done
# every package of the matrix once (the scipy=no tools are a subset of scipy=yes's)
all_deb_bytes=$(find "$debs"/pytorch-{base,framework,tools-scipy-no,tools-scipy-yes} -maxdepth 1 \
  -name '*.deb' -printf '%f %s\n' | sort -u | awk '{s += $2} END {printf "%d\n", s}')
all_deb_count=$(find "$debs"/pytorch-{base,framework,tools-scipy-no,tools-scipy-yes} -maxdepth 1 \
  -name '*.deb' -printf '%f\n' | sort -u | wc -l)
say "  matrix: $all_deb_count packages, $(mb "$all_deb_bytes") MB of .deb"

# --- run dir (fresh every time) ----------------------------------------------
run=$work/run
rm -rf -- "$run"
mkdir -p "$run/logs" "$run/out"
logs=$run/logs
T=$run/out
export TMPDIR=$run/tmp # strata's run-step roots
mkdir -p "$TMPDIR"
S() { echo "$run/strata-store.$1"; }

mem_kb=$(awk '/^MemTotal/ {print $2}' /proc/meminfo)
cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
fs_type=$(df -T "$work" | awk 'NR == 2 {print $2}')
machine="$(nproc) cpus ($cpu_model), $((mem_kb / 1024 / 1024)) GiB RAM, kernel $(uname -r), work dir on $fs_type"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
say "  machine: $machine; load average $load_start"
warm_debs() { cat "$debs"/pytorch-*/*.deb >/dev/null; }

# --- the pipeline ------------------------------------------------------------
# pipeline_cell CELL ROOT OUT.tar.zst FULL: the root of one cell from the
# packages; with FULL=1 also the dpkg status and the run steps.
pipeline_cell() {
  local cell=$1 root=$2 out=$3 full=$4 dir f cmd layer
  local -a envargs=() cmds=()
  local i
  for ((i = 0; i < ${#run_env[@]}; i += 2)); do
    envargs+=(--setenv "${run_env[i]}" "${run_env[i + 1]}")
  done
  mkdir "$root"
  [[ $full != 1 ]] || mkdir -p "$root/var/lib/dpkg"
  for layer in base framework tools; do
    case $layer in
    base) dir=$debs/pytorch-base cmds=("${base_runs[@]}") ;;
    framework) dir=$debs/pytorch-framework cmds=("${framework_runs[@]}") ;;
    tools) dir=$debs/pytorch-tools-scipy-$cell cmds=("${tools_runs[@]}") ;;
    esac
    for f in "$dir"/*.deb; do
      dpkg-deb -x "$f" "$root"
      if [[ $full == 1 ]]; then
        [[ ! -s $root/var/lib/dpkg/status ]] || echo >>"$root/var/lib/dpkg/status"
        dpkg-deb -I "$f" control | sed '1a Status: install ok installed' >>"$root/var/lib/dpkg/status"
      fi
    done
    [[ $full == 1 ]] || continue
    for cmd in "${cmds[@]}"; do
      bwrap --bind "$root" / --proc /proc --dev /dev --tmpfs /tmp --unshare-all --die-with-parent \
        --new-session --clearenv --chdir / "${envargs[@]}" /bin/sh -c "$cmd"
    done
  done
  tar -C "$root" -cf - . | zstd -3 -T0 -q -f -o "$out"
}
# what the timed child shell needs (arrays cannot be exported)
{
  declare -p debs run_env base_runs framework_runs tools_runs
  declare -f pipeline_cell
} >"$run/pipeline.sh"

# --- strata: cold and warm ---------------------------------------------------
step "strata build, cold (fresh store) and warm x $repeat"
for ((rep = 1; rep <= repeat; rep++)); do
  say " run $rep/$repeat"
  warm_debs
  measure strata_cold "$STRATA" --store "$(S $rep)" build "$recipe"
  grep -E '^debian-pytorch:.* sha256:' "$logs/strata_cold.r$rep.out" >"$T/images.$rep"
  if [[ $rep -eq 1 ]]; then
    cp "$T/images.1" "$T/images"
  elif ! diff -q "$T/images" "$T/images.$rep" >/dev/null; then
    die "strata build is not reproducible: $(paste -d' ' "$T/images" "$T/images.$rep")"
  fi
  n_built=$(grep -cE '^  \[[0-9]+/[0-9]+\] +[^ ]+ +built ' "$logs/strata_cold.r$rep.out" || true)
  [[ $n_built -eq 4 ]] || die "cold build built $n_built layers, expected 4 (base, framework, 2 x tools)"
  measure strata_warm "$STRATA" --store "$(S $rep)" build "$recipe"
  n_cached=$(grep -cE '^  \[[0-9]+/[0-9]+\] +[^ ]+ +cached ' "$logs/strata_warm.r$rep.out" || true)
  [[ $n_cached -eq 6 ]] || die "warm build reused $n_cached of 6 layers"
  grep -E '^debian-pytorch:.* sha256:' "$logs/strata_warm.r$rep.out" | diff -q - "$T/images" >/dev/null ||
    die "warm build changed the image digests"
  [[ $rep -eq 1 ]] || rm -rf -- "$(S $rep)"
done
sed 's/^/  /' "$logs/strata_cold.r1.out" >&2
store=$(S 1)
store_bytes=$(file_bytes "$store")
store_objects=$(file_bytes "$store/chunks" "$store/indexes" "$store/manifests")
store_du=$(du -sb "$store" | cut -f1)

# --- the pipeline: same roots --------------------------------------------------
step "dpkg-deb pipeline per cell x $repeat"
declare -A PIPE_TAR PLAIN_TAR
for ((rep = 1; rep <= repeat; rep++)); do
  say " run $rep/$repeat"
  for c in "${cells[@]}"; do
    rm -rf -- "$run/pipe-$c" "$run/plain-$c"
    warm_debs
    measure "pipeline_$c" bash -c 'set -euo pipefail; . "$0"; pipeline_cell "$@"' "$run/pipeline.sh" "$c" "$run/pipe-$c" \
      "$T/pipe-$c.tar.zst" 1
    warm_debs
    measure "plain_$c" bash -c 'set -euo pipefail; . "$0"; pipeline_cell "$@"' "$run/pipeline.sh" "$c" "$run/plain-$c" \
      "$T/plain-$c.tar.zst" 0
    rm -rf -- "$run/plain-$c"
    [[ $rep -eq $repeat ]] || rm -rf -- "$run/pipe-$c"
  done
done
sum_wall() { awk -v a="${WALL[$1]}" -v b="${WALL[$2]}" 'BEGIN {printf "%.2f\n", a + b}'; }
sum_cpu() {
  awk -v a="${CPU[$1]}" -v b="${CPU[$2]}" 'BEGIN {split(a, x, "/"); split(b, y, "/");
    printf "%.1f/%.1f\n", x[1] + y[1], x[2] + y[2]}'
}
pipe_wall=$(sum_wall pipeline_no pipeline_yes)
plain_wall=$(sum_wall plain_no plain_yes)
for c in "${cells[@]}"; do
  PIPE_TAR[$c]=$(stat -c %s "$T/pipe-$c.tar.zst")
  PLAIN_TAR[$c]=$(stat -c %s "$T/plain-$c.tar.zst")
done

# --- export, compare, pack the exported roots --------------------------------------
# manifest DIR: one sorted line per entry; file contents by sha256 except .pyc
# (size only: their header holds the source's mtime).
manifest() {
  (
    cd "$1"
    find . -printf '%y %m %U:%G %s %p -> %l\n' | sed 's/^\([dl] [0-9]* [0-9:]*\) [0-9]* /\1 - /' | sort
    find . -type f ! -name '*.pyc' -print0 | sort -z | xargs -0 -r sha256sum
  )
}
step "export both images, compare with the pipeline's roots, tar | zstd -3 -T0 each"
declare -A EXP_TAR SIZE_ROOT FILES_ROOT
roots_same=yes
for c in "${cells[@]}"; do
  e=$run/export-$c
  rm -rf -- "$e"
  "$STRATA" --store "$store" export "$image:$(tag_of "$c")" "$e" 2>"$logs/export-$c.err" ||
    die "strata export failed: $(tail -n 1 "$logs/export-$c.err")"
  manifest "$e" >"$logs/manifest-strata-$c"
  manifest "$run/pipe-$c" >"$logs/manifest-pipeline-$c"
  if ! diff "$logs/manifest-pipeline-$c" "$logs/manifest-strata-$c" >"$logs/roots-$c.diff"; then
    roots_same=no
    say "  cell scipy=$c: the exported root differs from the pipeline's ($(grep -c '^[<>]' "$logs/roots-$c.diff") lines, $logs/roots-$c.diff):"
    head -n 10 "$logs/roots-$c.diff" >&2
  else
    say "  cell scipy=$c: exported root identical to the pipeline's"
  fi
  SIZE_ROOT[$c]=$(du -sb "$e" | cut -f1)
  FILES_ROOT[$c]=$(find "$e" -type f | wc -l)
  rep=1
  measure "tar_zstd_$c" bash -c 'set -o pipefail; tar -C "$1" -cf - . | zstd -3 -T0 -q -f -o "$2"' _ \
    "$e" "$T/export-$c.tar.zst"
  EXP_TAR[$c]=$(stat -c %s "$T/export-$c.tar.zst")
  rm -rf -- "$e" "$run/pipe-$c"
done
[[ $roots_same == yes ]] || die "strata and the pipeline do not make the same roots (see $logs/roots-*.diff)"
exp_tar_sum=$((EXP_TAR[no] + EXP_TAR[yes]))
pipe_tar_sum=$((PIPE_TAR[no] + PIPE_TAR[yes]))
cell_deb_sum=$((DEB_BYTES[no] + DEB_BYTES[yes]))
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

# --- results ---------------------------------------------------------------
t_cold=${WALL[strata_cold]} t_warm=${WALL[strata_warm]}
{
  echo "strata build benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $machine"
  echo "load average: $load_start at the start, $load_end at the end"
  echo "strata $strata_rev ($STRATA); recipe recipes/debian-pytorch.yaml, cells scipy=no, scipy=yes"
  for c in "${cells[@]}"; do
    echo "cell scipy=$c: ${DEB_COUNT[$c]} packages, $(mb "${DEB_BYTES[$c]}") MB of .deb; root ${FILES_ROOT[$c]} files, $(mb "${SIZE_ROOT[$c]}") MB (du -sb)"
  done
  echo "matrix: $all_deb_count distinct packages, $all_deb_bytes bytes ($(mb "$all_deb_bytes") MB) of .deb; .deb files read from the page cache"
  echo "times: fastest of $repeat run(s) (cpu = user/sys s of that run); every run listed on the right"
  echo
  echo "build (whole matrix)                 wall s   cpu u/s  rss MiB  vs pipeline  runs"
  row() { printf '%-36s %7s %9s %8s %12s  %s\n' "$1" "$2" "$3" "$4" "$(ratio "$2" "$pipe_wall")" "$5"; }
  row "strata build, cold (fresh store)" "$t_cold" "${CPU[strata_cold]}" "${RSS[strata_cold]}" "${RUNS[strata_cold]}"
  row "strata build, warm (all cached)" "$t_warm" "${CPU[strata_warm]}" "${RSS[strata_warm]}" "${RUNS[strata_warm]}"
  row "pipeline: deb -x+status+run+tar|zstd" "$pipe_wall" "$(sum_cpu pipeline_no pipeline_yes)" "-" "no ${RUNS[pipeline_no]}; yes ${RUNS[pipeline_yes]}"
  row "  (deb -x + tar|zstd only)" "$plain_wall" "$(sum_cpu plain_no plain_yes)" "-" "no ${RUNS[plain_no]}; yes ${RUNS[plain_yes]}"
  echo "  pipeline = per cell, in sequence: dpkg-deb -x of every package, dpkg status, the recipe's run"
  echo "  steps in bwrap, tar | zstd -3 -T0; its roots are checked identical to strata's exported roots."
  echo
  echo "bytes                                         bytes      MB  store / this"
  row2() { printf '%-38s %12s %7s %13s\n' "$1" "$2" "$(mb "$2")" "$(ratio "$store_bytes" "$2")"; }
  row2 "strata store (all files)" "$store_bytes"
  printf '%-38s %12s %7s\n' "  of which chunks+indexes+manifests" "$store_objects" "$(mb "$store_objects")"
  printf '%-38s %12s %7s\n' "  du -sb" "$store_du" "$(mb "$store_du")"
  row2 ".deb files, each package once" "$all_deb_bytes"
  row2 ".deb files, per cell (summed)" "$cell_deb_sum"
  row2 "tar|zstd -3 of each exported root, sum" "$exp_tar_sum"
  row2 "  cell scipy=no" "${EXP_TAR[no]}"
  row2 "  cell scipy=yes" "${EXP_TAR[yes]}"
  row2 "pipeline's tar.zst files, sum" "$pipe_tar_sum"
  row2 "  (deb -x + tar|zstd only), sum" "$((PLAIN_TAR[no] + PLAIN_TAR[yes]))"
  echo "  tar|zstd -3 -T0 of the exported roots: no ${WALL[tar_zstd_no]} s, yes ${WALL[tar_zstd_yes]} s"
  echo
  echo "targets"
  printf '  %-6s cold build <= 1.0 x pipeline:            %s s vs %s s (ratio %s)\n' \
    "$(met "$t_cold" "$pipe_wall")" "$t_cold" "$pipe_wall" "$(ratio "$t_cold" "$pipe_wall")"
  printf '  %-6s cached rebuild of the matrix <= 2 s:     %s s\n' "$(met "$t_warm" 2)" "$t_warm"
  printf '  %-6s store <= 0.6 x sum of tar|zstd per cell: %s vs %s bytes (ratio %s)\n' \
    "$(met "$store_bytes" "$(awk -v a="$exp_tar_sum" 'BEGIN {printf "%d", 0.6 * a}')")" \
    "$store_bytes" "$exp_tar_sum" "$(ratio "$store_bytes" "$exp_tar_sum")"
} >"$run/results.txt"

step "results (also in $run/results.txt; logs in $logs)"
cat "$run/results.txt"
