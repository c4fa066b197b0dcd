#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# strata build / plan / images / inspect / tag / rmi: a 2x2 matrix with an
# exclude builds three images sharing the base layer; --cell selects cells;
# rebuilds reuse exactly the layers whose key did not change (input content,
# not stat data, decides; recipe text of a layer rebuilds it and everything
# above); builds are reproducible across stores, checkouts and -j, and
# SOURCE_DATE_EPOCH sets every mtime and gives other digests; plan shows
# the same keys a build uses without creating anything; tags come and go.
. "$(dirname "$0")/lib.sh"

W=$T/w
mkdir -p "$W/base/etc" "$W/top-12.1" "$W/top-12.4"
cd "$W"
printf 'hello\n' >base/etc/hello
text_file base/etc/big 300000
printf 'a\n' >top-12.1/x
printf 'b\n' >top-12.4/x
printf 'middle\n' >mid.txt
printf 'conf 1\n' >top.conf
write_recipe() { # MID_DEST
  cat >r.yaml <<EOF
image: demo
tag: "\${t}-cu\${cuda}"
matrix:
  cuda: ["12.1", "12.4"]
  t: [a, b]
  exclude:
    - {cuda: "12.1", t: b}
layers:
  - name: base
    sources:
      - dir: ./base
  - name: mid
    sources:
      - file: ./mid.txt
        dest: $1
  - name: top
    sources:
      - dir: ./top-\${cuda}
        dest: /top
      - file: ./top.conf
        dest: /etc/
config:
  env: {FOO: bar}
  labels: {cuda: "\${cuda}", t: "\${t}"}
EOF
}
write_recipe '/opt/${t}.txt'
REFS=(demo:a-cu12.1 demo:a-cu12.4 demo:b-cu12.4)

# status of LAYER in cell REF in the last build output: built / cached
layer_status() { # REF LAYER
  awk -v ref="$1" -v layer="$2" '
    index($0, ref " (") == 1 { in_cell = 1; next }
    /^[^ ]/ { in_cell = 0 }
    in_cell && $2 == layer { print $3 }' "$T/out"
}
expect_status() { # WANT LAYER REF...
  local want=$1 layer=$2 ref got
  shift 2
  for ref in "$@"; do
    got=$(layer_status "$ref" "$layer")
    [ "$got" = "$want" ] || fail "$ref: layer $layer is '$got', want '$want': $(cat "$T/out")"
  done
}
# "REF sha256:<64 hex>" lines of the last build, sorted
image_lines() { grep -E '^[^ ]+ sha256:[0-9a-f]{64}$' "$T/out" | sort; }
# digest of layer LAYER of image REF
layer_digest() { # STORE REF LAYER
  expect_ok st "$1" inspect "$2"
  awk -v l="$3" '$1 == l { print $2 }' "$T/out"
}
image_digest() { # STORE REF
  expect_ok st "$1" inspect "$2"
  awk '$1 == "digest" { print $2 }' "$T/out"
}

# --- matrix: 3 images, the base built once ---
S=$T/store
expect_ok st "$S" build r.yaml
image_lines >"$T/images.1"
[ "$(wc -l <"$T/images.1")" -eq 3 ] || fail "expected 3 images: $(cat "$T/out")"
for ref in "${REFS[@]}"; do
  grep -q "^$ref sha256:" "$T/images.1" || fail "no image line for $ref"
done
grep -q 'cuda=12.1,t=b\|b-cu12.1' "$T/out" && fail "the excluded cell was built"
[ "$(grep -cE '^  \[1/3\] base +built ' "$T/out")" -eq 1 ] || fail "base not built exactly once"
[ "$(grep -cE '^  \[1/3\] base +cached ' "$T/out")" -eq 2 ] || fail "base not cached twice"
# the first cell builds everything
expect_status built base demo:a-cu12.1
expect_status built mid demo:a-cu12.1
# a-cu12.4 shares base and mid (same file, same dest) with a-cu12.1
expect_status cached mid demo:a-cu12.4
expect_status built top demo:a-cu12.4
expect_status built mid demo:b-cu12.4
base=$(layer_digest "$S" demo:a-cu12.1 base)
[[ $base =~ $DIGEST_RE ]] || fail "inspect shows no base layer digest: $(cat "$T/out")"
for ref in "${REFS[@]}"; do
  [ "$(layer_digest "$S" "$ref" base)" = "$base" ] || fail "$ref has another base layer"
  grep -q '^  FOO=bar$' "$T/out" || fail "$ref: env not in inspect: $(cat "$T/out")"
  grep -qx "  cuda=${ref##*-cu}" "$T/out" || fail "$ref: cuda label: $(cat "$T/out")"
  [ "$(grep -c '^  [a-z]* *sha256:' "$T/out")" -eq 3 ] || fail "$ref: not 3 layers"
done
[ "$(layer_digest "$S" demo:a-cu12.1 top)" != "$(layer_digest "$S" demo:a-cu12.4 top)" ] ||
  fail "different top inputs gave the same top layer"
[ "$(layer_digest "$S" demo:a-cu12.1 mid)" != "$(layer_digest "$S" demo:b-cu12.4 mid)" ] ||
  fail "different mid dest gave the same mid layer"
# inspect by digest shows the same image
d=$(image_digest "$S" demo:b-cu12.4)
expect_ok st "$S" inspect "$d"
grep -qx "digest    $d" "$T/out" || fail "inspect by digest: $(cat "$T/out")"
grep -qx "$(sed -n 's/^demo:b-cu12.4 //p' "$T/images.1")" <<<"$d" || fail "build line and inspect disagree"
expect_ok st "$S" store fsck

# --- --cell selects cells ---
S2=$T/store-cells
expect_ok st "$S2" build --cell cuda=12.4 r.yaml
image_lines | cut -d' ' -f1 >"$T/got"
printf 'demo:a-cu12.4\ndemo:b-cu12.4\n' | cmp -s - "$T/got" || fail "--cell cuda=12.4 built: $(cat "$T/got")"
expect_ok st "$S2" build --cell t=b,cuda=12.1,cuda=12.4 r.yaml
image_lines | cut -d' ' -f1 >"$T/got"
printf 'demo:b-cu12.4\n' | cmp -s - "$T/got" || fail "--cell t=b,... built: $(cat "$T/got")"
expect_status cached top demo:b-cu12.4
expect_ok st "$S2" images
grep -q '^demo:a-cu12.1 ' "$T/out" && fail "--cell built a cell it does not match"
# the digests are those of the full build
for ref in demo:a-cu12.4 demo:b-cu12.4; do
  grep -qx "$ref $(image_digest "$S2" "$ref")" "$T/images.1" || fail "$ref differs from the full build"
done
S3=$T/store-none
expect_fail 2 "unknown axis 'python'" st "$S3" build --cell python=3 r.yaml
[ "$(grep -c . "$T/err")" -eq 1 ] || fail "more than one error line: $(cat "$T/err")"
expect_fail 2 "'9\.9'.*cuda|cuda.*'9\.9'" st "$S3" build --cell cuda=9.9 r.yaml
expect_fail 2 "unknown axis" st "$S3" plan --cell python=3 r.yaml
[ ! -e "$S3" ] || fail "a rejected --cell created the store"
# a filter whose values exist but select only the excluded cell
expect_fail 2 "matches no cell" st "$S3" build --cell cuda=12.1,t=b r.yaml

# --- rebuild: everything cached, same digests ---
expect_ok st "$S" build r.yaml
image_lines >"$T/images.2"
cmp -s "$T/images.1" "$T/images.2" || fail "rebuild changed image digests"
grep -qE '^  \[[0-9]/3\] [a-z]+ +built ' "$T/out" && fail "rebuild built a layer: $(cat "$T/out")"
[ "$(grep -cE '^  \[[0-9]/3\] [a-z]+ +cached ' "$T/out")" -eq 9 ] || fail "rebuild: not 9 cached layers"

# --- one input of the top layer changes: only top is rebuilt ---
mid_a=$(layer_digest "$S" demo:a-cu12.1 mid)
printf 'conf 2\n' >top.conf
expect_ok st "$S" build r.yaml
expect_status cached base "${REFS[@]}"
expect_status cached mid "${REFS[@]}"
expect_status built top "${REFS[@]}"
image_lines >"$T/images.3"
[ -z "$(comm -12 "$T/images.1" "$T/images.3")" ] || fail "an image kept its digest after its top changed"
[ "$(layer_digest "$S" demo:a-cu12.1 mid)" = "$mid_a" ] || fail "mid changed"
expect_ok st "$S" export demo:a-cu12.1 "$T/ex-conf"
[ "$(cat "$T/ex-conf/etc/top.conf")" = "conf 2" ] || fail "export has the old top.conf"

# --- same content, new mtime: stat cache miss, same key, same digests ---
touch -d '2001-02-03 04:05:06' mid.txt top.conf
expect_ok st "$S" build r.yaml
image_lines >"$T/images.4"
cmp -s "$T/images.3" "$T/images.4" || fail "touching inputs changed image digests"
# the key of mid did not change, so the layers above it are reused
expect_status cached base "${REFS[@]}"
expect_status cached top demo:a-cu12.4 demo:b-cu12.4
# plan agrees: nothing to build
expect_ok st "$S" plan r.yaml
grep -q 'to build' "$T/out" && fail "plan after touch: $(cat "$T/out")"

# --- new content of the same size with the old mtime restored: still rebuilt ---
cp -p mid.txt "$T/mid.ref"
printf 'MIDDLE\n' >mid.txt
touch -r "$T/mid.ref" mid.txt
expect_ok st "$S" build r.yaml
expect_status built mid demo:a-cu12.1 demo:b-cu12.4
expect_status cached mid demo:a-cu12.4 # same key as a-cu12.1's, built just before
expect_status built top "${REFS[@]}"
expect_ok st "$S" export demo:b-cu12.4 "$T/ex-mid"
[ "$(cat "$T/ex-mid/opt/b.txt")" = MIDDLE ] || fail "stat cache hid a content change"
printf 'middle\n' >mid.txt
expect_ok st "$S" build r.yaml # back to the content of images.4: all reused
image_lines >"$T/images.5"
cmp -s "$T/images.4" "$T/images.5" || fail "restoring mid.txt did not give back the digests"
expect_status cached top "${REFS[@]}"

# --- the recipe text of the middle layer changes: mid and top rebuilt ---
top_a4=$(layer_digest "$S" demo:a-cu12.4 top)
write_recipe '/opt/m-${t}.txt'
expect_ok st "$S" build r.yaml
expect_status cached base "${REFS[@]}"
expect_status built mid demo:a-cu12.1 demo:b-cu12.4
expect_status cached mid demo:a-cu12.4 # same key as a-cu12.1's, built just before
expect_status built top "${REFS[@]}"
expect_ok st "$S" export demo:a-cu12.4 "$T/ex-m"
[ -f "$T/ex-m/opt/m-a.txt" ] && [ ! -e "$T/ex-m/opt/a.txt" ] || fail "new mid dest not in the export"
# the top layer's content did not change, only its key
[ "$(layer_digest "$S" demo:a-cu12.4 top)" = "$top_a4" ] || fail "top layer content changed"
write_recipe '/opt/${t}.txt'
expect_ok st "$S" build r.yaml
image_lines >"$T/images.6"
cmp -s "$T/images.4" "$T/images.6" || fail "recipe restored, digests differ"
grep -qE ' built ' "$T/out" && fail "restored recipe rebuilt a layer: $(cat "$T/out")"

# --- a cached key whose layer index is gone is rebuilt ---
base_hex=${base#sha256:}
mv "$(object_path "$S" indexes "$base_hex")" "$T/base.index"
expect_ok st "$S" build --cell cuda=12.1 r.yaml
expect_status built base demo:a-cu12.1
image_lines | grep -qx "$(grep '^demo:a-cu12.1 ' "$T/images.6")" || fail "rebuilt base gave another image"
[ -f "$(object_path "$S" indexes "$base_hex")" ] || fail "base index not written back"
expect_ok st "$S" store fsck

# --- reproducible: fresh stores, -j, another checkout ---
expect_ok st "$T/repro1" build -j 1 r.yaml
image_lines >"$T/repro.1"
cmp -s "$T/images.6" "$T/repro.1" || fail "a fresh store gave other digests"
cp -a "$W" "$T/checkout2"
expect_ok st "$T/repro2" build -j 4 "$T/checkout2/r.yaml"
image_lines >"$T/repro.2"
cmp -s "$T/repro.1" "$T/repro.2" || fail "another checkout / -j 4 gave other digests"
expect_ok st "$T/repro1" export demo:a-cu12.1 "$T/ex-0"
check_mtimes "$T/ex-0" 0

# --- SOURCE_DATE_EPOCH: every mtime, other digests, its own cache entries ---
SOURCE_DATE_EPOCH=1700000000 expect_ok st "$T/repro1" build r.yaml
image_lines >"$T/sde.1"
[ -z "$(comm -12 "$T/repro.1" "$T/sde.1")" ] || fail "SOURCE_DATE_EPOCH kept a digest: $(cat "$T/sde.1")"
grep -qE ' built ' "$T/out" || fail "SOURCE_DATE_EPOCH reused layers built with mtime 0"
expect_ok st "$T/repro1" export demo:a-cu12.1 "$T/ex-sde"
check_mtimes "$T/ex-sde" 1700000000
assert_same_tree "$T/ex-0" "$T/ex-sde" # only the mtimes differ
SOURCE_DATE_EPOCH=1700000000 expect_ok st "$T/sde-fresh" build r.yaml
image_lines | cmp -s "$T/sde.1" - || fail "SOURCE_DATE_EPOCH build not reproducible"
# and back to the default: the mtime-0 layers are still cached
expect_ok st "$T/repro1" build r.yaml
image_lines | cmp -s "$T/repro.1" - || fail "default build after SOURCE_DATE_EPOCH differs"
grep -qE ' built ' "$T/out" && fail "default build after SOURCE_DATE_EPOCH rebuilt: $(cat "$T/out")"

# --- a file source's own mode and owner (no mode:, owner: source) are inputs ---
printf 'tool\n' >tool
chmod 0644 tool
cat >f.yaml <<'EOF'
image: filemode
layers:
  - name: tool
    sources:
      - file: ./tool
        dest: /bin/tool
      - file: ./tool
        dest: /bin/tool-owned
        owner: source
  - name: above
    sources:
      - file: ./mid.txt
EOF
F=$T/store-filemode
expect_ok st "$F" build f.yaml
expect_ok st "$F" export filemode:latest "$T/fm-1"
[ "$(stat -c '%a %u:%g' "$T/fm-1/bin/tool")" = "644 0:0" ] || fail "file mode/owner (644 0:0)"
chmod 0755 tool
chown 1234:4321 tool
expect_ok st "$F" plan f.yaml # refreshes the stat cache: must not hide the change
grep -qE '\] tool +key .* to build$' "$T/out" || fail "plan: a chmod'ed file input is cached: $(cat "$T/out")"
expect_ok st "$F" build f.yaml
grep -qE '\] tool +built ' "$T/out" || fail "chmod/chown of a file input did not rebuild: $(cat "$T/out")"
grep -qE '\] above +built ' "$T/out" || fail "the layer above a changed layer was reused"
img_f=$(grep '^filemode:latest ' "$T/out")
expect_ok st "$F" export filemode:latest "$T/fm-2"
[ "$(stat -c '%a %u:%g' "$T/fm-2/bin/tool")" = "755 0:0" ] || fail "new mode not in the image"
[ "$(stat -c '%a %u:%g' "$T/fm-2/bin/tool-owned")" = "755 1234:4321" ] || fail "new owner not in the image"
expect_ok st "$T/store-filemode2" build f.yaml
grep -qx "$img_f" "$T/out" || fail "same inputs, other image in a fresh store: $(cat "$T/out")"

# --- plan: fresh store all "to build", same keys as the build, no images ---
P=$T/store-plan
expect_ok st "$P" plan r.yaml
grep -E '^  \[' "$T/out" >"$T/plan.1"
[ "$(wc -l <"$T/plan.1")" -eq 9 ] || fail "plan: not 9 layer lines: $(cat "$T/out")"
[ "$(grep -c 'to build$' "$T/plan.1")" -eq 9 ] || fail "plan on a fresh store: $(cat "$T/out")"
grep -qE '^  \[1/3\] base +key sha256:[0-9a-f]{16}  to build$' "$T/plan.1" || fail "plan line format"
[ "$(grep base "$T/plan.1" | awk '{print $4}' | sort -u | wc -l)" -eq 1 ] ||
  fail "plan: base keys differ between cells"
grep -qE 'sha256:[0-9a-f]{64}$' "$T/out" && fail "plan printed an image digest"
expect_ok st "$P" images
[ "$(wc -l <"$T/out")" -eq 1 ] || fail "plan created images: $(cat "$T/out")"
[ -z "$(find "$P" -path '*manifests*' -type f)" ] || fail "plan stored a manifest"
expect_fail 1 "not found" st "$P" inspect demo:a-cu12.1
expect_ok st "$P" build --cell cuda=12.1 r.yaml
expect_ok st "$P" plan r.yaml
grep -E '^  \[' "$T/out" >"$T/plan.2"
# same keys before and after
diff <(awk '{print $2, $4}' "$T/plan.1") <(awk '{print $2, $4}' "$T/plan.2") >/dev/null ||
  fail "plan keys changed by building: $(diff "$T/plan.1" "$T/plan.2")"
[ "$(grep -c ' cached$' "$T/plan.2")" -eq 6 ] || fail "plan after one cell: $(cat "$T/plan.2")"
expect_ok st "$P" build r.yaml
expect_ok st "$P" plan r.yaml
[ "$(grep -c ' cached$' "$T/out")" -eq 9 ] || fail "plan after build: $(cat "$T/out")"

# --- images, tag, rmi ---
expect_ok st "$P" images
[ "$(wc -l <"$T/out")" -eq 4 ] || fail "images: $(cat "$T/out")"
for ref in "${REFS[@]}"; do
  d=$(grep "^$ref " "$T/repro.1" | cut -d' ' -f2)
  grep -qE "^$ref +${d:0:19} +3 layers " "$T/out" || fail "images: $ref not with ${d:0:19}"
done
d=$(image_digest "$P" demo:b-cu12.4)
expect_ok st "$P" tag demo:b-cu12.4 other/name:v1
[ "$(image_digest "$P" other/name:v1)" = "$d" ] || fail "tag points elsewhere"
expect_ok st "$P" tag "$d" other/name:v2
[ "$(image_digest "$P" other/name:v2)" = "$d" ] || fail "tag by digest points elsewhere"
expect_ok st "$P" images
grep -qE "^other/name:v1 +${d:0:19} " "$T/out" || fail "images lacks the new tag: $(cat "$T/out")"
[ "$(wc -l <"$T/out")" -eq 6 ] || fail "images after tag: $(cat "$T/out")"
expect_fail 1 "not found" st "$P" tag nothing:here x:y
expect_fail 2 "usage|invalid" st "$P" tag demo:b-cu12.4 'Bad Name:!'
expect_ok st "$P" rmi demo:b-cu12.4 other/name:v2
expect_fail 1 "not found" st "$P" inspect demo:b-cu12.4
expect_fail 1 "not found" st "$P" inspect other/name:v2
[ "$(image_digest "$P" other/name:v1)" = "$d" ] || fail "rmi of one tag removed the other"
expect_ok st "$P" inspect "$d" # the image itself stays
expect_fail 1 "not found" st "$P" rmi demo:b-cu12.4
expect_fail 1 "not found" st "$P" rmi nothing:here
expect_fail 1 "not found" st "$P" export demo:b-cu12.4 "$T/ex-gone"
[ ! -e "$T/ex-gone" ] || fail "export of a removed tag created its destination"
expect_ok st "$P" images
[ "$(wc -l <"$T/out")" -eq 4 ] || fail "images after rmi: $(cat "$T/out")"
grep -q '^demo:b-cu12.4 ' "$T/out" && fail "rmi'd tag still listed"
expect_ok st "$P" store fsck
echo PASS
