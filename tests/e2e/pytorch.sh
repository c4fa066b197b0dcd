#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# End to end on real packages: recipes/debian-pytorch.yaml (Debian 12 python3,
# PyTorch, jupyter; a matrix of two cells, with and without scipy) is built
# from ~500 Debian packages into a fresh store, exported, and run:
#
#   - every layer of a fresh store is built once: the second cell reuses the
#     first cell's base and framework layers (same digests in strata inspect)
#   - in the exported root (bubblewrap, no network) `import torch` works and
#     prints the version the python3-torch package carries, numpy computes
#     through BLAS (an alternatives symlink the recipe creates), dpkg lists
#     every package as installed (ii), and the precompiled bytecode is up to
#     date (compileall on a read-only root has nothing to write)
#   - in the scipy cell scipy works and libblas.so.3 is OpenBLAS
#   - a second build reuses every layer and gives the same image digests
#   - a build into a second fresh store gives the same digests (reproducible)
#
# Needs root, bubblewrap, dpkg and apt (Debian); the packages are downloaded
# into ${STRATA_FIXTURES:-/var/cache/strata-fixtures} by
# tests/fixtures/fetch-pytorch-debs.sh. Skips (77) when they cannot be fetched
# because no Debian mirror is reachable. Takes ~9 minutes on 2 cores, ~4 GB
# of disk under $TMPDIR (default /var/tmp).
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)
# Stores and roots take a few GB: not in /tmp, which may be in memory.
export TMPDIR=${TMPDIR:-/var/tmp}
. "$here/../cli/lib.sh"

src=${SRCDIR:-$(cd "$here/../.." && pwd -P)}
recipe=$src/recipes/debian-pytorch.yaml

need_root
for t in bwrap dpkg-deb apt-get tar; do
  command -v "$t" >/dev/null || skip "'$t' is not installed"
done

# --- packages ----------------------------------------------------------------
mirror_reachable() {
  local uri host port
  uri=$(apt-get -qq --print-uris download python3 2>/dev/null | head -n 1 | tr -d "'" | cut -d' ' -f1)
  [[ $uri == *://* ]] || uri=http://deb.debian.org/debian
  host=${uri#*://}
  host=${host%%/*}
  [[ $uri == https:* ]] && port=443 || port=80
  timeout 10 bash -c "exec 3<>/dev/tcp/$host/$port" 2>/dev/null
}
echo "fetching packages (tests/fixtures/fetch-pytorch-debs.sh)"
if ! debs=$("$src/tests/fixtures/fetch-pytorch-debs.sh" 2>"$T/fetch.err"); then
  tail -n 5 "$T/fetch.err" >&2
  mirror_reachable || skip "the Debian packages cannot be fetched (no mirror reachable)"
  fail "fetch-pytorch-debs.sh failed although a mirror is reachable"
fi
[ -L "$src/recipes/debs" ] || fail "the fetch script did not link recipes/debs"

torch_deb=$(ls "$debs"/pytorch-framework/python3-torch_*.deb)
[ -f "$torch_deb" ] || fail "no python3-torch package in $debs/pytorch-framework"
deb_version=$(dpkg-deb -f "$torch_deb" Version) # e.g. 1.13.1+dfsg-4
upstream=${deb_version#*:}
upstream=${upstream%-*}
upstream=${upstream%%+*} # 1.13.1
# The version the package's Python module reports (Debian builds 1.13.1 as
# '1.13.0a0'): read from the package's own torch/version.py.
py_version=$(dpkg-deb --fsys-tarfile "$torch_deb" |
  tar -xO ./usr/lib/python3/dist-packages/torch/version.py |
  sed -n "s/^__version__ = '\(.*\)'\$/\1/p")
[ -n "$py_version" ] || fail "no __version__ in torch/version.py of $torch_deb"
[ "${py_version%.*}" = "${upstream%.*}" ] ||
  fail "torch/version.py says $py_version, the package is $deb_version"
echo "python3-torch $deb_version (torch.__version__ $py_version)"

# --- build into a fresh store --------------------------------------------------
# layer_states FILE: "image:tag layer state" for each layer line, and
# image_digest FILE TAG: the digest printed for that image.
layer_states() {
  awk '/^debian-pytorch:[^ ]+ \(/ {cell = $1} /^  \[[0-9]+\/[0-9]+\]/ {print cell, $2, $3}' "$1"
}
image_digest() { awk -v t="$2" '$1 == t && $2 ~ /^sha256:/ {print $2}' "$1"; }

no=debian-pytorch:1.13-scipy-no
yes=debian-pytorch:1.13-scipy-yes
S1=$T/store1
echo "cold build of the matrix into a fresh store"
t0=$SECONDS
expect_ok st "$S1" build "$recipe"
cp "$T/out" "$T/build1.out"
cat "$T/build1.out"
echo "  ($((SECONDS - t0)) s)"
cat >"$T/want-states" <<EOF
$no base built
$no framework built
$no tools built
$yes base cached
$yes framework cached
$yes tools built
EOF
layer_states "$T/build1.out" >"$T/states"
diff -u "$T/want-states" "$T/states" ||
  fail "cold build: expected every layer built once, the second cell reusing base and framework"
img_no=$(image_digest "$T/build1.out" "$no")
img_yes=$(image_digest "$T/build1.out" "$yes")
[[ $img_no =~ $DIGEST_RE && $img_yes =~ $DIGEST_RE ]] || fail "build printed no image digests"
[ "$img_no" != "$img_yes" ] || fail "the two cells have the same image digest"

# --- the two images share base and framework -----------------------------------
expect_ok st "$S1" inspect "$no"
awk '/^  [a-z]+ +sha256:/ {print $1, $2}' "$T/out" >"$T/layers.no"
grep -q '^  framework=torch-'"$upstream"'$' "$T/out" ||
  fail "label framework=torch-$upstream missing from $no (the recipe names another version?)"
expect_ok st "$S1" inspect "$yes"
awk '/^  [a-z]+ +sha256:/ {print $1, $2}' "$T/out" >"$T/layers.yes"
[ "$(wc -l <"$T/layers.no")" -eq 3 ] || fail "$no does not have 3 layers"
for l in base framework; do
  a=$(awk -v l=$l '$1 == l {print $2}' "$T/layers.no")
  b=$(awk -v l=$l '$1 == l {print $2}' "$T/layers.yes")
  [ -n "$a" ] && [ "$a" = "$b" ] || fail "layer $l differs between the cells: $a vs $b"
done
a=$(awk '$1 == "tools" {print $2}' "$T/layers.no")
b=$(awk '$1 == "tools" {print $2}' "$T/layers.yes")
[ "$a" != "$b" ] || fail "the tools layers of the two cells are the same"
echo "ok: the cells share base and framework"

# --- export the first cell and run it -------------------------------------------
R=$T/root
expect_ok st "$S1" export "$no" "$R"
echo "exported $no: $(tail -n 1 "$T/err")"
sandbox() {
  bwrap --bind "$R" / --proc /proc --dev /dev --tmpfs /tmp --unshare-all --die-with-parent \
    --clearenv --setenv PATH /usr/bin:/bin --setenv HOME /root --setenv LANG C.UTF-8 "$@"
}
expect_ok sandbox python3 -c 'import torch; print(torch.__version__)'
got=$(cat "$T/out")
[ "$got" = "$py_version" ] || fail "import torch printed '$got', the package has $py_version"
echo "ok: import torch -> $got"
expect_ok sandbox python3 -c '
import numpy, torch
a = numpy.arange(9.0).reshape(3, 3)
print(int(a.dot(a).sum()), int(torch.from_numpy(a).matmul(torch.ones(3, dtype=torch.float64)).sum()))'
[ "$(cat "$T/out")" = "486 36" ] || fail "numpy/torch computed '$(cat "$T/out")', expected '486 36'"
echo "ok: numpy and torch compute (BLAS found through the alternatives links)"
expect_ok sandbox dpkg-query -W -f '${db:Status-Abbrev}|${Package}|${Version}\n'
grep -qx "ii |python3-torch|$deb_version" "$T/out" ||
  fail "dpkg-query does not list python3-torch $deb_version as installed: $(grep python3-torch "$T/out")"
n_pkgs=$(ls "$debs"/pytorch-{base,framework,tools-scipy-no}/*.deb | wc -l)
n_ii=$(grep -c '^ii |' "$T/out" || true)
[ "$n_ii" -eq "$n_pkgs" ] || fail "dpkg lists $n_ii packages as installed, the cell has $n_pkgs"
grep -v '^ii |' "$T/out" | head -n 3 | grep . && fail "dpkg lists packages not installed"
expect_ok sandbox dpkg -l python3-torch
grep -q '^ii  python3-torch ' "$T/out" || fail "dpkg -l python3-torch: $(tail -n 1 "$T/out")"
echo "ok: dpkg lists all $n_pkgs packages as installed"
# Bytecode written by the run steps is valid for the exported files (their
# mtimes are normalised): compileall on a read-only root finds nothing to do.
expect_ok bwrap --ro-bind "$R" / --proc /proc --dev /dev --tmpfs /tmp --unshare-all \
  --die-with-parent --clearenv --setenv PATH /usr/bin:/bin \
  python3 -m compileall -q /usr/lib/python3.11 /usr/lib/python3/dist-packages
echo "ok: precompiled bytecode is up to date"
chmod -R u+rwX "$R"
rm -rf "$R"

# --- the scipy cell: scipy imports, OpenBLAS selected as dpkg would -------------------
expect_ok st "$S1" export "$yes" "$R"
expect_ok sandbox python3 -c '
import numpy, scipy, scipy.linalg, torch
print(scipy.__version__, round(float(scipy.linalg.det(numpy.array([[2.0, 1.0], [1.0, 3.0]]))), 6))'
scipy_deb=$(ls "$debs"/pytorch-tools-scipy-yes/python3-scipy_*.deb)
scipy_version=$(dpkg-deb -f "$scipy_deb" Version)
scipy_version=${scipy_version%-*}
[ "$(cat "$T/out")" = "$scipy_version 5.0" ] ||
  fail "scipy cell printed '$(cat "$T/out")', expected '$scipy_version 5.0'"
expect_ok sandbox readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3
[ "$(cat "$T/out")" = /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ] ||
  fail "libblas.so.3 of the scipy cell is $(cat "$T/out"), not OpenBLAS"
echo "ok: scipy $scipy_version works in $yes, BLAS is OpenBLAS"
chmod -R u+rwX "$R"
rm -rf "$R"

# --- warm rebuild: everything cached, same digests ------------------------------------
t0=$(date +%s%N)
expect_ok st "$S1" build "$recipe"
t1=$(date +%s%N)
cp "$T/out" "$T/build2.out"
n_cached=$(layer_states "$T/build2.out" | awk '$3 == "cached"' | wc -l)
[ "$n_cached" -eq 6 ] || { cat "$T/build2.out"; fail "warm rebuild: $n_cached of 6 layers cached"; }
[ "$(image_digest "$T/build2.out" "$no")" = "$img_no" ] &&
  [ "$(image_digest "$T/build2.out" "$yes")" = "$img_yes" ] || fail "warm rebuild changed the image digests"
echo "ok: warm rebuild: every layer cached, same digests ($(((t1 - t0) / 1000000)) ms)"

# --- reproducible: a second fresh store gives the same digests -----------------------
# (one cell, to keep the test short: base, framework and a tools layer)
S2=$T/store2
echo "build of $no into a second fresh store"
expect_ok st "$S2" build --cell scipy=no "$recipe"
cp "$T/out" "$T/build3.out"
n_built=$(layer_states "$T/build3.out" | awk '$3 == "built"' | wc -l)
[ "$n_built" -eq 3 ] || { cat "$T/build3.out"; fail "second store: $n_built of 3 layers built"; }
expect_ok st "$S2" inspect "$no"
awk '/^  [a-z]+ +sha256:/ {print $1, $2}' "$T/out" >"$T/layers.no2"
diff -u "$T/layers.no" "$T/layers.no2" || fail "layer digests differ between two fresh stores"
got=$(image_digest "$T/build3.out" "$no")
[ "$got" = "$img_no" ] || fail "image digest differs between two fresh stores: $img_no vs $got"
echo "ok: reproducible: same layer and image digests from a second fresh store"
echo "PASS"
