# SPDX-License-Identifier: Apache-2.0
# Shared by the benchmarks (bench/*.sh); source it after setting `prog`:
#
#   die MSG / say MSG / step TITLE      messages (stderr)
#   bench_work_dir DEFAULT              $BENCH_WORK or DEFAULT, checked: absolute,
#                                       not /, outside the repository; sets `work`
#   bench_tools WHY CMD:PKG...          installs the Debian packages of missing
#                                       commands (and /usr/bin/time), then needs
#                                       root (WHY says why)
#   bench_strata                        the strata binary: $STRATA, or $BENCH_REV
#                                       built from `git archive` under $work/src,
#                                       or build-bench/ of the work tree (release
#                                       builds); sets STRATA and strata_rev
#   file_bytes PATH...                  sum of the regular files' apparent sizes
#   ratio A B / mb BYTES / now_ns / calc EXPR / met A LIMIT
#   measure KEY CMD...                  one timed run of CMD (after a sync), its
#                                       output in $logs/KEY.r$rep.{out,err,time};
#                                       WALL/CPU/RSS[KEY] keep the fastest run,
#                                       RUNS[KEY] every wall time
#
# Needs `repo` (the repository root) and, for measure, `logs` and `rep`.

die() { printf '\n%s: FAILED: %s\n' "$prog" "$*" >&2; exit 1; }
say() { printf '%s\n' "$*" >&2; }
step() { printf '\n== %s\n' "$*" >&2; }

bench_work_dir() {
  work=${BENCH_WORK:-$1}
  [[ $work == /* ]] || die "BENCH_WORK must be an absolute path, not '$work'"
  work=${work%/}
  [[ -n $work && $work != / ]] || die "BENCH_WORK must not be /"
  case "$work/" in "$repo"/*) die "BENCH_WORK ($work) must be outside the repository" ;; esac
}

bench_tools() {
  local why=$1 pair
  shift
  local -a need=()
  for pair in "$@"; do
    command -v "${pair%%:*}" >/dev/null || need+=("${pair#*:}")
  done
  [[ -x /usr/bin/time ]] || need+=(time)
  if [[ ${#need[@]} -gt 0 ]]; then
    [[ $(id -u) -eq 0 ]] || die "missing packages (${need[*]}); run as root so they can be installed"
    say "installing: ${need[*]}"
    apt-get update -qq >&2 || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >&2 ||
      die "apt-get install ${need[*]} failed"
  fi
  [[ $(id -u) -eq 0 ]] || die "run as root ($why)"
}

# build_strata SRC BUILDDIR: release build (configured once, then brought up to date).
build_strata() {
  if [[ ! -f $2/build.ninja ]]; then
    command -v meson >/dev/null && command -v ninja >/dev/null ||
      die "meson and ninja are needed to build strata (see README), or set STRATA=/path/to/strata"
    meson setup "$2" "$1" --buildtype=release -Dtests=false >&2 || die "meson setup failed"
  fi
  ninja -C "$2" >&2 || die "building strata failed"
}

bench_strata() {
  if [[ -n ${STRATA:-} ]]; then
    [[ -x $STRATA ]] || die "STRATA=$STRATA is not an executable"
    strata_rev="given binary"
  elif [[ -n ${BENCH_REV:-} ]]; then
    # A committed revision, exported from git and built outside the work tree.
    local full_rev src
    full_rev=$(git -C "$repo" rev-parse --verify "$BENCH_REV^{commit}") || die "no commit '$BENCH_REV'"
    strata_rev=${full_rev:0:12}
    src=$work/src/$strata_rev
    if [[ ! -f $src/.exported ]]; then
      rm -rf -- "$src"
      mkdir -p "$src"
      git -C "$repo" archive "$full_rev" | tar -x -C "$src" || die "git archive $full_rev failed"
      touch "$src/.exported"
    fi
    build_strata "$src" "$src/build"
    STRATA=$src/build/cli/strata
  else
    build_strata "$repo" "$repo/build-bench"
    STRATA=$repo/build-bench/cli/strata
    strata_rev=$(git -C "$repo" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
    git -C "$repo" diff --quiet HEAD -- 2>/dev/null || strata_rev+=" + uncommitted changes"
  fi
  export STRATA_PROGRESS=0
  say "strata: $STRATA ($("$STRATA" version), $strata_rev)"
}

file_bytes() { find "$@" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {printf "%d\n", s}'; }
calc() { awk "BEGIN {printf \"%s\n\", $1}"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f\n", a / b; else print "n/a"}'; }
mb() { awk -v a="$1" 'BEGIN {printf "%.1f\n", a / 1e6}'; }
now_ns() { date +%s%N; }
met() { awk -v a="$1" -v b="$2" 'BEGIN {print (a <= b) ? "MET" : "MISSED"}'; }

declare -A WALL CPU RSS RUNS
measure() {
  local key=$1 t0 t1 rc=0 f
  shift
  f=$logs/$key.r$rep
  sync
  t0=$(now_ns)
  /usr/bin/time -f '%U %S %M' -o "$f.time" "$@" >"$f.out" 2>"$f.err" || rc=$?
  t1=$(now_ns)
  if [[ $rc -ne 0 ]]; then
    tail -n 20 "$f.err" >&2
    die "$key exited with status $rc: $*"
  fi
  local u s m w
  read -r u s m < <(tail -n 1 "$f.time")
  w=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f\n", (b - a) / 1e9}')
  RUNS[$key]="${RUNS[$key]:+${RUNS[$key]} }$w"
  if [[ -z ${WALL[$key]:-} ]] || awk -v a="$w" -v b="${WALL[$key]}" 'BEGIN {exit !(a < b)}'; then
    WALL[$key]=$w
    CPU[$key]=$(printf '%.1f/%.1f' "$u" "$s")
    RSS[$key]=$((m / 1024))
  fi
  say "  $(printf '%-20s' "$key") $w s wall, $u s user, $s s sys, $((m / 1024)) MiB max rss"
}
