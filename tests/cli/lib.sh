# SPDX-License-Identifier: Apache-2.0
# Shared helpers for the shell integration tests (tests/cli/*.sh). Source it
# first thing; it sets strict mode, makes a private temp dir $T that is removed
# on exit, and provides:
#   fail MSG...                      print FAIL and exit 1
#   skip MSG...                      print SKIP and exit 77 (meson counts it as skipped)
#   on_exit CMD                      run CMD (eval'd) at exit, before $T is removed, last first
#   run CMD...                       run CMD, stdout to $T/out, stderr to $T/err; sets $rc
#   expect_ok CMD...                 CMD must exit 0
#   expect_fail CODE PATTERN CMD...  CMD must exit CODE with PATTERN (ERE) on stderr;
#                                    code 1 also needs exactly one 'strata: error:' line
#   vg CODE ARGS...                  strata ARGS under valgrind memcheck: no errors, no definite
#                                    leaks, exit CODE; extra valgrind options in array VG_ARGS;
#                                    strata-core, exec'd by the `strata` launcher, is traced too
#   pack STORE TREE [ARGS...]        strata layer pack; prints the digest (checked)
#   tree_manifest DIR                sorted, exact description of every entry of DIR
#   assert_same_tree A B             tree_manifest of A and B are identical
#   rand_file PATH BYTES             incompressible content
#   text_file PATH BYTES [SEED]      compressible content
#   flip_byte FILE OFFSET            invert one byte in place
#   wait_until TIMEOUT CMD...        poll CMD every 10 ms until it succeeds
#   need_root                        skip unless running as root
#   assert_no_unpack_tmp DIR         no '*.strata-tmp-*' staging dir left in DIR
set -euo pipefail
export LC_ALL=C
: "${STRATA:?STRATA must point at the strata binary}"
export STRATA_PROGRESS=0
unset SOURCE_DATE_EPOCH STRATA_STORE STRATA_LOG

T=$(mktemp -d "${TMPDIR:-/tmp}/strata-cli.XXXXXX")
_exit_hooks=()
on_exit() { _exit_hooks+=("$1"); }
_cleanup() {
  local rc=$? i
  set +e
  # background processes this test started and did not reap
  for i in $(jobs -p); do kill -9 "$i" 2>/dev/null; done
  wait 2>/dev/null
  for ((i = ${#_exit_hooks[@]} - 1; i >= 0; i--)); do
    eval "${_exit_hooks[$i]}"
  done
  if [ -d "$T" ]; then
    chmod -R u+rwX "$T" 2>/dev/null
    rm -rf "$T"
  fi
  exit "$rc"
}
trap _cleanup EXIT
set -E
trap 'echo "FAIL: exit $? from: $BASH_COMMAND (${BASH_SOURCE[0]}:$LINENO)" >&2' ERR
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*" >&2
  if [ -s "$T/err" ]; then
    echo "--- last stderr:" >&2
    tail -n 20 "$T/err" >&2
  fi
  exit 1
}

skip() {
  echo "SKIP: $*"
  exit 77
}

need_root() { [ "$(id -u)" -eq 0 ] || skip "needs root (ownership, mounts)"; }

# A crash, a sanitizer report or an assertion must never pass as a clean failure.
_check_no_crash() {
  if grep -Eq 'Sanitizer|runtime error:|Segmentation fault|Assertion .* failed|core dumped|double free|stack smashing' "$T/err"; then
    fail "crash or sanitizer report from: $*"
  fi
  if [ "$rc" -ge 128 ]; then
    fail "killed by signal $((rc - 128)): $*"
  fi
}

run() {
  rc=0
  "$@" >"$T/out" 2>"$T/err" || rc=$?
  _check_no_crash "$@"
}

expect_ok() {
  run "$@"
  [ "$rc" -eq 0 ] || fail "expected exit 0, got $rc: $*"
}

expect_fail() {
  local code=$1 pattern=$2
  shift 2
  run "$@"
  [ "$rc" -eq "$code" ] || fail "expected exit $code, got $rc: $*"
  grep -Eq -- "$pattern" "$T/err" || fail "stderr does not match /$pattern/: $*"
  if [ "$code" -eq 1 ]; then
    local n
    n=$(grep -c '^strata: error: ' "$T/err" || true)
    [ "$n" -eq 1 ] || fail "expected exactly one 'strata: error:' line, got $n: $*"
    grep '^strata: error: ' "$T/err" | grep -Eq -- "$pattern" ||
      fail "the error line does not match /$pattern/: $*"
  fi
}

DIGEST_RE='^sha256:[0-9a-f]{64}$'

vg() { # EXPECTED-EXIT ARGS...
  local want=$1
  shift
  rc=0
  G_SLICE=always-malloc G_DEBUG=gc-friendly valgrind --quiet --error-exitcode=99 \
    --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite \
    --track-fds=no --trace-children=yes --trace-children-skip='/usr/*,/bin/*,/sbin/*' \
    ${VG_ARGS[@]+"${VG_ARGS[@]}"} --log-file="$T/vg.log" \
    "$STRATA" "$@" >"$T/out" 2>"$T/err" || rc=$?
  if [ "$rc" -eq 99 ] || [ -s "$T/vg.log" ]; then
    cat "$T/vg.log" >&2
    fail "valgrind reports errors for: strata $*"
  fi
  [ "$rc" -eq "$want" ] || fail "strata $*: exit $rc under valgrind, want $want: $(cat "$T/err")"
}

pack() {
  local store=$1 tree=$2
  shift 2
  expect_ok "$STRATA" --store "$store" layer pack "$@" "$tree"
  local d
  d=$(tail -n 1 "$T/out")
  [[ $d =~ $DIGEST_RE ]] || fail "pack printed no digest: '$d'"
  echo "$d"
}

# strata with a store: st STORE ARGS...
st() {
  local store=$1
  shift
  "$STRATA" --store "$store" "$@"
}

# Object file of a digest (sha256:<hex> or <hex>) of a kind folder.
object_path() { # STORE KIND-DIR DIGEST
  local hex=${3#sha256:}
  echo "$1/$2/${hex:0:2}/$hex"
}

# One line per entry, sorted: path, type, mode (octal, with setuid/setgid/
# sticky), uid, gid, then for files size, link count, hardlink group (the
# smallest path of the inode) and sha256; for symlinks the target; then all
# xattrs (hex). Mtimes are not included (see check_mtimes).
tree_manifest() {
  local dir=$1
  (
    cd "$dir"
    local -a types=() paths=() targets=()
    local -A group=()
    local meta p l type mode uid gid size nlink ino i line x h
    while IFS= read -r -d '' meta && IFS= read -r -d '' p && IFS= read -r -d '' l; do
      read -r type mode uid gid size nlink ino <<<"$meta"
      [ -n "$p" ] || p=.
      types+=("$meta")
      paths+=("$p")
      targets+=("$l")
      if [ "$type" = f ] && [ "$nlink" -gt 1 ]; then
        if [ -z "${group[$ino]-}" ] || [[ $p < ${group[$ino]} ]]; then
          group[$ino]=$p
        fi
      fi
    done < <(find . -printf '%y %m %U %G %s %n %i\0%P\0%l\0')
    for i in "${!paths[@]}"; do
      read -r type mode uid gid size nlink ino <<<"${types[$i]}"
      p=${paths[$i]}
      printf -v line '%q type=%s mode=%s owner=%s:%s' "$p" "$type" "$mode" "$uid" "$gid"
      case $type in
      f)
        read -r h _ < <(sha256sum <"$p")
        printf -v line '%s size=%s nlink=%s group=%q sha256=%s' "$line" "$size" "$nlink" \
          "${group[$ino]-$p}" "$h"
        ;;
      l) printf -v line '%s target=%q' "$line" "${targets[$i]}" ;;
      esac
      x=$(getfattr -h -d -m- -e hex --absolute-names -- "$p" 2>/dev/null || true)
      [ -z "$x" ] || x=$(sort <<<"$x")
      x=${x#\# file: *$'\n'}
      x=${x//$'\n'/ }
      x=${x% }
      [ -z "$x" ] || line+=" xattrs=[$x]"
      printf '%s\n' "$line"
    done | sort
  )
}

assert_same_tree() {
  tree_manifest "$1" >"$T/manifest.a"
  tree_manifest "$2" >"$T/manifest.b"
  if ! diff -u "$T/manifest.a" "$T/manifest.b" >"$T/manifest.diff"; then
    cat "$T/manifest.diff" >&2
    fail "trees differ: $1 $2"
  fi
}

# Every entry of DIR (not following symlinks) has mtime WANT.
check_mtimes() {
  local dir=$1 want=$2 bad
  bad=$(find "$dir" -printf '%T@ %P\0' | tr '\n\0' '?\n' | awk -v w="$want" '$1 + 0 != w + 0' | head -n 5)
  [ -z "$bad" ] || fail "entries of $dir with mtime other than $want: $bad"
}

rand_file() { head -c "$2" /dev/urandom >"$1"; }

text_file() {
  local seed=${3:-0}
  yes "line $seed of some compressible text, $seed$seed$seed" |
    head -c "$2" >"$1" || true
}

flip_byte() {
  local file=$1 off=$2 b
  b=$(od -An -tu1 -j "$off" -N1 "$file" | tr -d ' ')
  [ -n "$b" ] || fail "flip_byte: offset $off beyond $file"
  # shellcheck disable=SC2059
  printf "$(printf '\\%03o' $((b ^ 0xff)))" |
    dd of="$file" bs=1 seek="$off" count=1 conv=notrunc status=none
}

wait_until() {
  local timeout=$1
  shift
  local deadline=$((SECONDS + timeout))
  until "$@"; do
    [ "$SECONDS" -lt "$deadline" ] || return 1
    sleep 0.01
  done
}

# Number of entries in a directory (0 if it does not exist).
count_files() {
  [ -d "$1" ] || {
    echo 0
    return
  }
  find "$1" -type f | wc -l
}

# The store has no object of a kind and no temp file left.
assert_empty_dir() {
  local n
  n=$(count_files "$1")
  [ "$n" -eq 0 ] || fail "$1 is not empty: $(find "$1" -type f | head -n 5)"
}

assert_no_unpack_tmp() {
  local left
  left=$(find "$1" -maxdepth 1 -name '*.strata-tmp-*' | head -n 3)
  [ -z "$left" ] || fail "unpack left a staging dir: $left"
}
