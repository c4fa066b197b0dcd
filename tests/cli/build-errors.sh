#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Bad recipes and bad inputs: a recipe problem is exit 2 with one line
# FILE:LINE:COL and no store touched; a missing input names the source's
# position; an archive with a path-traversing entry fails the build with
# exit 1 naming the archive and the entry, tags nothing, writes nothing
# outside the store and leaves a store that fsck passes.
. "$(dirname "$0")/lib.sh"
PY=$(command -v /usr/bin/python3 python3 | head -n 1) || skip "python3 not installed"

W=$T/w
mkdir -p "$W/base/etc"
cd "$W"
printf 'hello\n' >base/etc/hello
S=$T/store
expect_ok st "$S" store init

# expect_recipe_error FILE LINE COL PATTERN [build|plan]: exit 2, exactly one
# line on stderr, "strata: error: FILE:LINE:COL: ..." matching PATTERN
expect_recipe_error() {
  local file=$1 line=$2 col=$3 pattern=$4 cmd=${5:-build}
  expect_fail 2 "$pattern" st "$S" "$cmd" "$file"
  [ "$(wc -l <"$T/err")" -eq 1 ] || fail "$file: not one line: $(cat "$T/err")"
  grep -Eq "^strata: error: $file:$line:$col: .*($pattern)" "$T/err" ||
    fail "$file: want $file:$line:$col /$pattern/, got: $(cat "$T/err")"
}
images_count() { # tagged images in $S (through run: a crash fails the test)
  expect_ok st "$S" images
  tail -n +2 "$T/out" | wc -l
}

# --- malformed recipes ---
printf 'image: x\nlayers:\n  - name: a\n    sourcs:\n      - dir: ./base\n' >unknown-key.yaml
expect_recipe_error unknown-key.yaml 4 5 "unknown key 'sourcs'"
expect_recipe_error unknown-key.yaml 4 5 "unknown key 'sourcs'" plan
printf 'image: x\nlayers: [\n' >bad-yaml.yaml
expect_recipe_error bad-yaml.yaml '[0-9]+' '[0-9]+' 'invalid YAML'
printf 'image: x\nlayers:\n  - name: a\n    sources:\n      - dir: ./base\n        strip: 1\n' >strip-dir.yaml
expect_recipe_error strip-dir.yaml 6 9 'strip'
printf 'image: x\ntag: "${nope}"\nlayers:\n  - name: a\n    sources:\n      - dir: ./base\n' >undef.yaml
expect_recipe_error undef.yaml 2 6 'undefined variable'
printf 'layers:\n  - name: a\n    sources:\n      - dir: ./base\n' >no-image.yaml
expect_recipe_error no-image.yaml 1 1 "image"
mkdir sub
printf 'image: x\nlayers:\n  - name: a\n    sources:\n      - dir: ./base\n    delete: [etc/x]\n' >sub/rel-delete.yaml
expect_recipe_error sub/rel-delete.yaml 6 14 'absolute'
expect_fail 2 "no-such.yaml" st "$S" build no-such.yaml
n=$(images_count)
[ "$n" -eq 0 ] || fail "a bad recipe tagged an image: $(cat "$T/out")"

# --- missing inputs: the position of the source's kind key ---
cat >missing.yaml <<'EOF'
image: x
layers:
  - name: a
    sources:
      - dir: ./base
  - name: b
    sources:
      - file: ./base/etc/hello
      -   archive: ./nope.tar
EOF
expect_recipe_error missing.yaml 9 11 "archive: cannot find '$W/nope.tar'"
expect_recipe_error missing.yaml 9 11 "cannot find" plan
printf 'image: x\nlayers:\n  - name: a\n    sources:\n      - deb: ./debs/*.deb\n' >no-deb.yaml
expect_recipe_error no-deb.yaml 5 9 'deb'
printf 'image: x\nlayers:\n  - name: a\n    sources:\n      - file: ./base\n' >file-is-dir.yaml
expect_recipe_error file-is-dir.yaml 5 9 'regular file|not a'
# in a matrix, only the cell whose input is missing fails
mkdir -p in-1
cat >matrix-missing.yaml <<'EOF'
image: m
tag: "v${n}"
matrix:
  n: ["1", "2"]
layers:
  - name: a
    sources:
      - dir: ./in-${n}
EOF
expect_fail 2 "in-2" st "$S" build matrix-missing.yaml
[ "$(grep -c '^strata: error: ' "$T/err")" -eq 1 ] || fail "not one error line: $(cat "$T/err")"
grep -q "^strata: error: matrix-missing.yaml:8:9: dir: cannot find '$W/in-2'" "$T/err" ||
  fail "matrix-missing.yaml: $(cat "$T/err")"
grep -q '^m:v1 sha256:' "$T/out" || fail "the good cell before the bad one was not built"
expect_fail 1 "not found" st "$S" inspect m:v2

# --- a path-traversing archive ---
"$PY" - <<'EOF'
import io, tarfile
with tarfile.open("evil.tar", "w") as t:
    for name, data in [("ok.txt", b"ok\n"), ("../evil", b"evil\n")]:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        t.addfile(ti, io.BytesIO(data))
EOF
cat >evil.yaml <<'EOF'
image: evil
layers:
  - name: base
    sources:
      - dir: ./base
  - name: bad
    sources:
      - archive: ./evil.tar
        dest: /opt
EOF
find "$T" -name evil >"$T/evil.before"
expect_fail 1 "evil\.tar.*'\.\./evil'|'\.\./evil'.*evil\.tar" st "$S" build evil.yaml
grep -q "^strata: error: evil.yaml:8:9: layer 'bad'" "$T/err" || fail "error does not name the layer: $(cat "$T/err")"
grep -q '^evil:latest sha256:' "$T/out" && fail "image line printed for a failed build"
expect_fail 1 "not found" st "$S" inspect evil:latest
n=$(images_count)
[ "$n" -eq 1 ] || fail "images after the failed build: $(cat "$T/out")"
find "$T" -name evil | cmp -s - "$T/evil.before" || fail "an 'evil' file appeared: $(find "$T" -name evil)"
expect_ok st "$S" store fsck
# plan reads archives only to hash them: it does not fail, and still nothing is tagged
expect_ok st "$S" plan evil.yaml
grep -qE '\] bad +key sha256:[0-9a-f]+  to build$' "$T/out" || fail "plan of evil.yaml: $(cat "$T/out")"
# the failure is not cached: building again fails the same way
expect_fail 1 "'\.\./evil'" st "$S" build evil.yaml
# an absolute entry and a hardlink escaping dest are refused too
"$PY" - <<'EOF'
import io, tarfile
with tarfile.open("abs.tar", "w") as t:
    ti = tarfile.TarInfo("/etc/abs"); ti.size = 1; t.addfile(ti, io.BytesIO(b"x"))
with tarfile.open("link.tar", "w") as t:
    ti = tarfile.TarInfo("hl"); ti.type = tarfile.LNKTYPE; ti.linkname = "../../etc/passwd"
    t.addfile(ti)
EOF
sed 's/evil\.tar/abs.tar/' evil.yaml >abs.yaml
expect_fail 1 "abs\.tar.*etc/abs" st "$S" build abs.yaml
sed 's/evil\.tar/link.tar/' evil.yaml >link.yaml
expect_fail 1 "link\.tar.*hl" st "$S" build link.yaml
# not an archive at all
printf 'this is not an archive\n' >junk.tar
sed 's/evil\.tar/junk.tar/' evil.yaml >junk.yaml
expect_fail 1 "junk\.tar" st "$S" build junk.yaml
n=$(images_count)
[ "$n" -eq 1 ] || fail "a failed build tagged an image: $(cat "$T/out")"
expect_ok st "$S" store fsck
# a fixed archive builds, and the base layer was reused from before
"$PY" - <<'EOF'
import io, tarfile
with tarfile.open("evil.tar", "w") as t:
    ti = tarfile.TarInfo("ok.txt"); ti.size = 3; t.addfile(ti, io.BytesIO(b"ok\n"))
EOF
expect_ok st "$S" build evil.yaml
grep -qE '\] base +cached ' "$T/out" || fail "base not cached: $(cat "$T/out")"
expect_ok st "$S" export evil:latest "$T/ex"
[ "$(cat "$T/ex/opt/ok.txt")" = ok ] || fail "fixed archive content"
expect_ok st "$S" store fsck

# --- usage errors ---
expect_fail 2 "usage|recipe" st "$S" build
expect_fail 2 "usage|recipe" st "$S" build evil.yaml extra.yaml
expect_fail 2 "usage|unknown option" st "$S" build --bogus evil.yaml
expect_fail 2 "usage" st "$S" inspect
expect_fail 2 "usage" st "$S" tag evil:latest
expect_fail 2 "usage" st "$S" export evil:latest
expect_fail 1 "not found" st "$S" inspect "sha256:$(printf x | sha256sum | cut -c1-64)"
echo PASS
