# SPDX-License-Identifier: Apache-2.0
# Helpers for the tests of strata serve/push/pull (source after lib.sh):
#   serve_start NAME STORE [ARGS...]   start `strata serve` on a free port; sets
#                                      ${NAME}_PID, ${NAME}_ADDR, log in $T/NAME.log
#   serve_stop NAME                    SIGTERM; the server must exit 0 and log "stopped"
#   make_image STORE DIR NAME:TAG MB   a one-layer image of random + text files
serve_start() {
  local name=$1 store=$2
  shift 2
  "$STRATA" --store "$store" serve --listen 127.0.0.1:0 "$@" >"$T/$name.log" 2>&1 &
  local pid=$!
  printf -v "${name}_PID" %s "$pid"
  on_exit "kill -9 $pid 2>/dev/null || true"
  wait_until 30 grep -q 'listening on' "$T/$name.log" ||
    { cat "$T/$name.log" >&2; fail "server $name did not start"; }
  local addr
  addr=$(sed -n 's/.*listening on \([0-9.]*:[0-9]*\).*/\1/p' "$T/$name.log")
  printf -v "${name}_ADDR" %s "$addr"
}

serve_stop() {
  local name=$1 pid_var="${1}_PID" src=0
  kill -TERM "${!pid_var}"
  wait "${!pid_var}" || src=$?
  [ "$src" -eq 0 ] || { tail -n 20 "$T/$name.log" >&2; fail "server $name exited $src"; }
  grep -q 'strata serve: stopped' "$T/$name.log" || fail "server $name did not stop cleanly"
  if grep -Eq 'Sanitizer|runtime error:' "$T/$name.log"; then
    cat "$T/$name.log" >&2
    fail "sanitizer report from server $name"
  fi
}

make_image() { # STORE DIR NAME:TAG MB
  local store=$1 dir=$2 ref=$3 mb=$4
  mkdir -p "$dir/tree/etc" "$dir/tree/data"
  head -c $((mb * 1024 * 1024)) /dev/urandom >"$dir/tree/data/blob"
  text_file "$dir/tree/etc/text" 200000 "$mb"
  ln -sf ../etc/text "$dir/tree/data/link"
  cat >"$dir/r.yaml" <<EOR
image: ${ref%%:*}
tag: ${ref#*:}
layers:
  - name: base
    sources:
      - dir: ./tree
EOR
  (cd "$dir" && "$STRATA" --store "$store" -q build r.yaml >/dev/null 2>"$T/build.err") ||
    { cat "$T/build.err" >&2; fail "build of $ref failed"; }
}
