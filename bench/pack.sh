#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/pack.sh — packs a real ~1 GB tree of Debian packages with strata and
# with the tools people use today, side by side, in one run:
#
#   strata layer pack            into a fresh strata store
#   casync make                  into a fresh casync chunk store (+ .caidx)
#   tar | zstd -3 -T0            one .tar.zst
#   ostree commit                into a fresh archive-mode repo
#
# then packs a modified copy (v2) of the tree into the same stores and reports
# the new bytes each tool stores, then unpacks with strata and with
# zstd -d | tar -x (plus casync extract and ostree checkout), and checks that
# strata's unpacked trees are identical to the originals.
#
# Environment:
#   BENCH_QUICK=1     small package set (python3-numpy) for a fast smoke run
#   BENCH_PACKAGES    override the package list (space separated)
#   BENCH_WORK        work dir, default /var/tmp/strata-bench (outside the repo)
#   STRATA            strata binary; default: build-bench/ in the repo, built
#                     (meson --buildtype=release) or brought up to date with ninja
#   BENCH_REV         instead, build this commit (git archive into
#                     $BENCH_WORK/src/, outside the work tree) and bench it
#   STRATA_FIXTURES   .deb cache, default /var/cache/strata-fixtures
#   BENCH_REPEAT      timed runs per command, default 3; tables show the fastest
#                     (the machine may be shared), every run is listed
#   BENCH_SETTLE      seconds to wait after deleting the previous run, default 65
#
# Needs root for apt-get (missing tools are installed) and for packing trees
# owned by root. The figures are printed as a table at the end and kept in
# $BENCH_WORK/run/results.txt; $BENCH_WORK/run (stores, trees, logs) stays for
# inspection until the next run replaces it.
set -euo pipefail
export LC_ALL=C

prog=bench/pack.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
repo=$(dirname "$here")
. "$here/lib.sh"
fixtures=$repo/tests/fixtures

# --- package set -----------------------------------------------------------
# The framework stack named in the issue (python3-torch, libtorch1.13,
# python3-numpy, python3-scipy, llvm-15) is only ~325 MB / 3.6k files in
# bookworm, so the full set adds the libraries and headers a development
# environment of that stack carries, to reach ~1 GB and ~30k files.
full_pkgs="python3-torch libtorch1.13 python3-numpy python3-scipy llvm-15
  libllvm15 llvm-15-dev libtorch-dev libboost1.74-dev python3-sympy libclang-common-15-dev"
quick_pkgs="python3-numpy"
if [[ -n ${BENCH_PACKAGES:-} ]]; then
  pkgs=$BENCH_PACKAGES
  set_name=bench-pack-custom-$(printf '%s' "$pkgs" | tr -s ' \n' '  ' | sha256sum | cut -c1-12)
elif [[ ${BENCH_QUICK:-0} == 1 ]]; then
  pkgs=$quick_pkgs
  set_name=bench-pack-quick
else
  pkgs=$full_pkgs
  set_name=bench-pack
fi
read -r -a pkgs <<<"$(echo $pkgs)"

# v2 edits
n_so=50        # .so files that get 4 KiB of random data appended
n_py=240       # .py files with one line changed
n_new=5        # new files of 1 MiB random data
seed=strata-bench-v2

# --- work dir --------------------------------------------------------------
bench_work_dir /var/tmp/strata-bench

# --- tools -----------------------------------------------------------------
step "tools"
bench_tools "the trees are owned by root and unpacked with their owners" casync:casync \
  ostree:ostree zstd:zstd tar:tar openssl:openssl diff:diffutils dpkg-deb:dpkg flock:util-linux
bench_strata
say "casync: $(casync --version | head -1); ostree: $(ostree --version | grep -m1 Version | tr -d \"\' ); $(zstd --version); $(tar --version | head -1)"

# --- helpers ---------------------------------------------------------------
du_b() { du -sb "$1" | cut -f1; }
mbps() { awk -v a="$1" -v s="$2" 'BEGIN {if (s > 0) printf "%.0f\n", a / 1e6 / s; else print "n/a"}'; }

repeat=${BENCH_REPEAT:-3}
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "BENCH_REPEAT must be a positive number, not '$repeat'"

# Deterministic pseudo-random bytes: rand_bytes SEED N
rand_bytes() {
  head -c "$2" /dev/zero | openssl enc -aes-256-ctr -nosalt -pbkdf2 -pass "pass:$seed-$1"
}

# verify ORIG COPY LABEL: same entries, types, modes, owners, link counts,
# symlink targets and file contents (mtimes are not compared: strata
# normalises them by default).
verify() {
  local a=$1 b=$2 label=$3
  say "  checking $b against $a"
  (cd "$a" && find . -printf '%y %m %U:%G %n %p -> %l\n' | sort) >"$logs/meta-$label-orig"
  (cd "$b" && find . -printf '%y %m %U:%G %n %p -> %l\n' | sort) >"$logs/meta-$label-copy"
  if ! diff "$logs/meta-$label-orig" "$logs/meta-$label-copy" >"$logs/meta-$label.diff"; then
    head -n 20 "$logs/meta-$label.diff" >&2
    die "$label: unpacked tree differs from $a in metadata (see $logs/meta-$label.diff)"
  fi
  if ! diff -r --no-dereference "$a" "$b" >"$logs/content-$label.diff" 2>&1; then
    head -n 20 "$logs/content-$label.diff" >&2
    die "$label: unpacked tree differs from $a in content (see $logs/content-$label.diff)"
  fi
  say "  $label: identical to the original ($(wc -l <"$logs/meta-$label-orig") entries, contents, modes, owners, links)"
}

warm() {
  local bytes
  bytes=$(tar -C "$1" -cf - . | wc -c)
  say "  page cache warmed: read $1 ($(mb "$bytes") MB tar stream)"
}

# --- fixtures --------------------------------------------------------------
step "fixtures: set '$set_name' (${pkgs[*]})"
debdir=$("$fixtures/fetch-debs.sh" "$set_name" "${pkgs[@]}")
mkdir -p "$work/trees"
v1=$work/trees/$set_name/v1
stamp=$( (cd "$debdir" && stat -c '%n %s' ./*.deb; cat "$fixtures/unpack-debs.sh") | sha256sum | cut -c1-16)
if [[ -d $v1 && -f $v1.stamp && $(cat "$v1.stamp") == "$stamp" ]]; then
  say "  reusing $v1"
else
  rm -rf -- "$v1" "$v1.stamp"
  mkdir -p "$(dirname "$v1")"
  "$fixtures/unpack-debs.sh" "$debdir" "$v1" >/dev/null
  echo "$stamp" >"$v1.stamp"
  say "  unpacked into $v1"
fi
tree_files=$(find "$v1" -type f | wc -l)
tree_entries=$(find "$v1" | wc -l)
tree_bytes=$(file_bytes "$v1")
say "  v1: $tree_files files ($tree_entries entries), $(mb "$tree_bytes") MB of file data"

mem_kb=$(awk '/^MemTotal/ {print $2}' /proc/meminfo)
if [[ $((mem_kb * 1024)) -lt $((tree_bytes * 4)) ]]; then
  say "  warning: RAM ($((mem_kb / 1024)) MiB) is small next to the tree; reads may not all come from the page cache"
fi

# --- run dir (fresh every time) ----------------------------------------------
run=$work/run
# The work dir may sit on an ext4 without a journal: there, for 60 s after a
# sync (up to 6 min before), creating files next to many freshly deleted
# inodes is slow (the allocator skips recently deleted inodes), which would
# tax whichever tool runs first. So: delete, sync, wait; and below, nothing
# is deleted while timed runs remain (each unpack goes to a fresh DEST).
if [[ -e $run ]]; then
  say "  removing the previous run ($run)"
  rm -rf -- "$run"
  sync
  settle=${BENCH_SETTLE:-65}
  say "  waiting ${settle} s for the file system to settle after the delete"
  sleep "$settle"
fi
mkdir -p "$run/logs" "$run/out"
# Room for v2, a store per tool and run, and every unpacked tree.
need_kb=$((tree_bytes / 1024 * (4 * repeat + 2 + repeat * 3 / 2)))
avail_kb=$(df -Pk "$run" | awk 'NR == 2 {print $4}')
[[ $avail_kb -ge $need_kb ]] ||
  die "$work needs about $((need_kb / 1024 / 1024)) GiB free, has $((avail_kb / 1024 / 1024)) GiB"
logs=$run/logs
T=$run/out
U=$run/unpack
mkdir -p "$U"
# Stores, one per repetition (v2 goes into the store its repetition's v1 made).
S() { echo "$run/strata-store.$1"; }
C() { echo "$run/casync-store.$1"; }
O() { echo "$run/ostree-repo.$1"; }

cpu_model=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
sha_ni=$(grep -qw sha_ni /proc/cpuinfo && echo yes || echo no)
fs_type=$(df -T "$work" | awk 'NR == 2 {print $2}')
machine="$(nproc) cpus ($cpu_model), sha_ni: $sha_ni, $((mem_kb / 1024 / 1024)) GiB RAM, kernel $(uname -r), work dir on $fs_type"
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
say "  machine: $machine; load average $load_start"

pack_tar() { tar -C "$1" -cf - . | zstd -3 -T0 -q -f -o "$2"; }
export -f pack_tar

# --- v1: pack into fresh stores --------------------------------------------
step "pack v1 ($(mb "$tree_bytes") MB, $tree_files files) x $repeat; every tool reads the tree from the page cache"
for ((rep = 1; rep <= repeat; rep++)); do
  say " run $rep/$repeat"
  warm "$v1"
  measure strata_pack "$STRATA" --store "$(S $rep)" layer pack "$v1"
  d=$(tail -n 1 "$logs/strata_pack.r$rep.out")
  [[ $d == sha256:* ]] || die "strata layer pack printed no digest (got '$d')"
  say "    $(grep -E '^(packed|chunks)' "$logs/strata_pack.r$rep.err" | tr '\n' ' ')"
  if [[ $rep -eq 1 ]]; then
    d1=$d
  elif [[ $d != "$d1" ]]; then
    die "strata layer pack is not deterministic: $d1 then $d for the same tree"
  fi
  measure casync_make casync make --digest=sha256 --store="$(C $rep)" "$T/v1.$rep.caidx" "$v1"
  measure tar_zstd bash -c 'set -o pipefail; pack_tar "$1" "$2"' _ "$v1" "$T/v1.tar.zst"
  # strata makes its objects durable (one syncfs per batch) before it
  # returns; the same pipeline followed by a syncfs, for reference only.
  measure tar_zstd_syncfs bash -c 'set -o pipefail; pack_tar "$1" "$2" && sync -f "$2"' _ "$v1" "$T/v1-sync.tar.zst"
  rm -f -- "$T/v1-sync.tar.zst"
  ostree --repo="$(O $rep)" init --mode=archive
  measure ostree_commit ostree --repo="$(O $rep)" commit --branch=bench --subject=v1 --tree=dir="$v1"
done
strata_v1=$(file_bytes "$(S 1)/chunks" "$(S 1)/indexes")
strata_v1_du=$(du_b "$(S 1)")
casync_v1=$(($(file_bytes "$(C 1)") + $(stat -c %s "$T/v1.1.caidx")))
casync_v1_du=$(($(du_b "$(C 1)") + $(stat -c %s "$T/v1.1.caidx")))
tar_v1=$(stat -c %s "$T/v1.tar.zst")
ostree_v1=$(file_bytes "$(O 1)/objects")
ostree_c1=$(tail -n 1 "$logs/ostree_commit.r1.out")
ostree_v1_du=$(du_b "$(O 1)/objects")
casync_store_v1=$(file_bytes "$(C 1)")

# --- v2 --------------------------------------------------------------------
step "v2: copy of v1, $n_so .so files +4 KiB, $n_py .py files with one line changed, $n_new new 1 MiB files"
v2=$run/v2
cp -a "$v1" "$v2"
# pick N FILE...: N names spread evenly over the (sorted) list, deterministic.
pick() {
  local n=$1
  shift
  local count=$# stride i
  if [[ $count -le $n ]]; then
    printf '%s\n' "$@"
    return
  fi
  stride=$((count / n))
  local -a all=("$@")
  for ((i = 0; i < n; i++)); do printf '%s\n' "${all[i * stride]}"; done
}
mapfile -t so_all < <(cd "$v2" && find . -type f \( -name '*.so' -o -name '*.so.*' \) | sort)
mapfile -t py_all < <(cd "$v2" && find . -type f -name '*.py' -size +0 | sort)
mapfile -t so_pick < <(pick "$n_so" "${so_all[@]}")
mapfile -t py_pick < <(pick "$n_py" "${py_all[@]}")
i=0
for f in "${so_pick[@]}"; do
  rand_bytes "so-$i" 4096 >>"$v2/$f"
  i=$((i + 1))
done
for f in "${py_pick[@]}"; do
  lines=$(wc -l <"$v2/$f")
  line=$(((lines + 1) / 2))
  [[ $line -ge 1 ]] || line=1
  sed -i "${line}s/\$/  # strata-bench v2/" "$v2/$f"
done
mkdir -p "$v2/usr/share/strata-bench"
for ((i = 1; i <= n_new; i++)); do
  rand_bytes "new-$i" 1048576 >"$v2/usr/share/strata-bench/new-$i.bin"
done
new_data=$((n_new * 1048576 + ${#so_pick[@]} * 4096))
say "  changed ${#so_pick[@]} of ${#so_all[@]} .so files, ${#py_pick[@]} of ${#py_all[@]} .py files, added $n_new files"
say "  incompressible new data: $new_data bytes ($(mb "$new_data") MB)"

step "pack v2 into the same stores x $repeat"
for ((rep = 1; rep <= repeat; rep++)); do
  say " run $rep/$repeat"
  warm "$v2"
  measure strata_pack_v2 "$STRATA" --store "$(S $rep)" layer pack "$v2"
  d=$(tail -n 1 "$logs/strata_pack_v2.r$rep.out")
  [[ $d == sha256:* ]] || die "strata layer pack (v2) printed no digest (got '$d')"
  say "    $(grep -E '^(packed|chunks)' "$logs/strata_pack_v2.r$rep.err" | tr '\n' ' ')"
  if [[ $rep -eq 1 ]]; then
    d2=$d
  elif [[ $d != "$d2" ]]; then
    die "strata layer pack is not deterministic: $d2 then $d for the same tree"
  fi
  measure casync_make_v2 casync make --digest=sha256 --store="$(C $rep)" "$T/v2.$rep.caidx" "$v2"
  measure tar_zstd_v2 bash -c 'set -o pipefail; pack_tar "$1" "$2"' _ "$v2" "$T/v2.tar.zst"
  measure ostree_commit_v2 ostree --repo="$(O $rep)" commit --branch=bench --subject=v2 --tree=dir="$v2"
done
strata_v2_new=$(($(file_bytes "$(S 1)/chunks" "$(S 1)/indexes") - strata_v1))
casync_v2_new=$(($(file_bytes "$(C 1)") - casync_store_v1 + $(stat -c %s "$T/v2.1.caidx")))
tar_v2_new=$(stat -c %s "$T/v2.tar.zst")
ostree_v2_new=$(($(file_bytes "$(O 1)/objects") - ostree_v1))

# --- unpack ----------------------------------------------------------------
step "unpack v1 x $repeat (stores and archives read from the page cache; a fresh DEST each run)"
for ((rep = 1; rep <= repeat; rep++)); do
  say " run $rep/$repeat"
  cat "$T/v1.tar.zst" "$T/v1.1.caidx" >/dev/null
  tar -C "$(S 1)" -cf - . | cat >/dev/null
  measure strata_unpack "$STRATA" --store "$(S 1)" layer unpack "$d1" "$U/strata.$rep"
  say "    $(tail -n 1 "$logs/strata_unpack.r$rep.err")"
  [[ $rep -eq 1 ]] && verify "$v1" "$U/strata.1" strata-v1
  measure tar_unpack bash -c 'set -o pipefail; mkdir "$2" && zstd -d -c -q "$1" | tar -x -C "$2"' \
    _ "$T/v1.tar.zst" "$U/tar.$rep"
  measure casync_extract casync extract --store="$(C 1)" "$T/v1.1.caidx" "$U/casync.$rep"
  measure ostree_checkout ostree --repo="$(O 1)" checkout "$ostree_c1" "$U/ostree.$rep"
done

step "checks"
"$STRATA" --store "$(S 1)" layer unpack "$d2" "$U/strata-v2" 2>"$logs/strata_unpack_v2.err" ||
  die "strata layer unpack of v2 failed: $(tail -n 1 "$logs/strata_unpack_v2.err")"
verify "$v2" "$U/strata-v2" strata-v2
rep=1
measure strata_fsck "$STRATA" --store "$(S 1)" store fsck
say "    $(cat "$logs/strata_fsck.r1.out" "$logs/strata_fsck.r1.err" | tail -n 1)"
load_end=$(cut -d' ' -f1-3 /proc/loadavg)
say "  removing the unpacked trees"
rm -rf -- "$U"

# --- results ---------------------------------------------------------------
t_strata=${WALL[strata_pack]} t_tar=${WALL[tar_zstd]}
tgt_time=$(calc "1.2 * $t_tar")
tgt_bytes=$(calc "1.15 * $tar_v1")

{
  echo "strata pack benchmark, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "machine: $machine"
  echo "load average: $load_start at the start, $load_end at the end"
  echo "strata $strata_rev ($STRATA); set '$set_name': ${pkgs[*]}"
  echo "tree v1: $tree_files files, $tree_entries entries, $tree_bytes bytes ($(mb "$tree_bytes") MB); all reads from a warm page cache"
  echo "v2 edits: ${#so_pick[@]} .so +4 KiB, ${#py_pick[@]} .py one line changed, $n_new x 1 MiB new; incompressible new data $new_data bytes ($(mb "$new_data") MB)"
  echo "times: fastest of $repeat runs (cpu = user/sys s of that run); every run listed on the right"
  echo
  echo "pack v1          wall s  cpu u/s    MB/s  stored bytes     MB vs tar.zst vs tar time  runs"
  row() {
    printf '%-16s %6s %9s %7s %13s %6s %10s %11s  %s\n' "$1" "${WALL[$2]}" "${CPU[$2]}" \
      "$(mbps "$tree_bytes" "${WALL[$2]}")" "$3" "$(mb "$3")" "$(ratio "$3" "$tar_v1")" \
      "$(ratio "${WALL[$2]}" "$t_tar")" "${RUNS[$2]}"
  }
  row "strata" strata_pack "$strata_v1"
  row "casync" casync_make "$casync_v1"
  row "tar|zstd -3 -T0" tar_zstd "$tar_v1"
  row "ostree archive" ostree_commit "$ostree_v1"
  row "tar|zstd+syncfs" tar_zstd_syncfs "$tar_v1"
  echo "  strata stored = chunks/ + indexes/ file sizes; casync = store + .caidx; ostree = objects/"
  echo "  du -sb: strata store $strata_v1_du, casync store+caidx $casync_v1_du, ostree objects $ostree_v1_du"
  echo "  tar|zstd+syncfs is for reference only (the pipeline, then syncfs as strata does); targets use plain tar|zstd"
  echo
  echo "pack v2          wall s  cpu u/s   new bytes     MB  vs new data  runs"
  row2() {
    printf '%-16s %6s %9s %11s %6s %12s  %s\n' "$1" "${WALL[$2]}" "${CPU[$2]}" "$3" "$(mb "$3")" \
      "$(ratio "$3" "$new_data")" "${RUNS[$2]}"
  }
  row2 "strata" strata_pack_v2 "$strata_v2_new"
  row2 "casync" casync_make_v2 "$casync_v2_new"
  row2 "tar|zstd (full)" tar_zstd_v2 "$tar_v2_new"
  row2 "ostree archive" ostree_commit_v2 "$ostree_v2_new"
  echo "  new bytes: strata/ostree store growth, casync store growth + new .caidx, tar.zst whole file"
  echo
  echo "unpack v1        wall s  cpu u/s    MB/s  vs tar  runs"
  row3() {
    printf '%-16s %6s %9s %7s %7s  %s\n' "$1" "${WALL[$2]}" "${CPU[$2]}" \
      "$(mbps "$tree_bytes" "${WALL[$2]}")" "$(ratio "${WALL[$2]}" "${WALL[tar_unpack]}")" "${RUNS[$2]}"
  }
  row3 "strata" strata_unpack
  row3 "zstd -d | tar -x" tar_unpack
  row3 "casync extract" casync_extract
  row3 "ostree checkout" ostree_checkout
  echo "strata store fsck: ${WALL[strata_fsck]} s; strata's unpacked v1 and v2 verified identical to the source trees"
  echo
  echo "targets"
  printf '  %-6s pack time <= 1.2 x tar|zstd:     %s s vs %s s (ratio %s)\n' \
    "$(met "$t_strata" "$tgt_time")" "$t_strata" "$tgt_time" "$(ratio "$t_strata" "$t_tar")"
  printf '  %-6s stored <= 1.15 x tar.zst:       %s vs %s bytes (ratio %s)\n' \
    "$(met "$strata_v1" "$tgt_bytes")" "$strata_v1" "$(printf '%.0f' "$tgt_bytes")" "$(ratio "$strata_v1" "$tar_v1")"
  printf '  %-6s v2 new bytes <= ostree new:     %s vs %s bytes (ratio %s)\n' \
    "$(met "$strata_v2_new" "$ostree_v2_new")" "$strata_v2_new" "$ostree_v2_new" "$(ratio "$strata_v2_new" "$ostree_v2_new")"
  printf '  %-6s unpack <= zstd -d | tar -x:     %s s vs %s s (ratio %s)\n' \
    "$(met "${WALL[strata_unpack]}" "${WALL[tar_unpack]}")" "${WALL[strata_unpack]}" "${WALL[tar_unpack]}" \
    "$(ratio "${WALL[strata_unpack]}" "${WALL[tar_unpack]}")"
} >"$run/results.txt"

step "results (also in $run/results.txt; logs in $logs)"
cat "$run/results.txt"
