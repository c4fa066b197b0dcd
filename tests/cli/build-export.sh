#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# What a built image contains, seen through strata export: delete: whiteouts
# remove lower paths, upper files replace lower ones, dir sources are owned
# by root unless owner: source (or a fixed owner), file sources take mode
# and dest, archives unpack under dest with strip, Debian packages unpack at
# / and are recorded installed in /var/lib/dpkg/status, a deb in an upper
# layer appending to the status of the layers below.
. "$(dirname "$0")/lib.sh"
need_root
command -v dpkg-deb >/dev/null || skip "dpkg-deb not installed"
PY=$(command -v /usr/bin/python3 python3 | head -n 1) || skip "python3 not installed"

W=$T/w
mkdir -p "$W"
cd "$W"

# --- inputs ---
mkdir -p base/etc/skel base/usr/bin base/var/log
printf 'welcome\n' >base/etc/motd
printf 'keep\n' >base/etc/keep
printf 'old\n' >base/etc/replace-me
printf 'skel\n' >base/etc/skel/.profile
printf 'old tool\n' >base/usr/bin/tool
printf 'log\n' >base/var/log/boot.log
mkdir -p upper/etc upper/usr/bin
printf 'new\n' >upper/etc/replace-me
printf 'new tool\n' >upper/usr/bin/tool
mkdir -p owned/sub
printf 'x\n' >owned/sub/f
ln -s sub/f owned/link
chown -R 1234:4321 owned
chown -h 1234:4321 owned/link
printf '#!/bin/sh\necho hello\n' >hello.sh
chmod 0600 hello.sh
chown 1234:4321 hello.sh
mkdir -p arch/pkg-1.0/bin arch/pkg-1.0/share/doc
printf 'bin\n' >arch/pkg-1.0/bin/run
chmod 0751 arch/pkg-1.0/bin/run
printf 'doc\n' >arch/pkg-1.0/share/doc/README
ln -s bin/run arch/pkg-1.0/run-link
tar --owner=0 --group=0 -C arch -cJf pkg.tar.xz pkg-1.0
"$PY" - <<'EOF'
import io, tarfile
with tarfile.open("owned.tar", "w") as t:
    ti = tarfile.TarInfo("a/owned-by-archive"); data = b"ar\n"; ti.size = len(data)
    ti.uid, ti.gid, ti.mode = 555, 666, 0o640
    t.addfile(ti, io.BytesIO(data))
EOF
mkdeb() { # NAME VERSION DIR
  local d=$T/debsrc/$1
  mkdir -p "$d/DEBIAN" "$d/usr/share/$1" "$3"
  printf 'Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: Test <test@example.org>\nDescription: test package %s\n' \
    "$1" "$2" "$1" >"$d/DEBIAN/control"
  printf '%s data\n' "$1" >"$d/usr/share/$1/data.txt"
  mkdir -p "$d/usr/bin"
  printf '#!/bin/sh\n' >"$d/usr/bin/$1"
  chmod 0755 "$d/usr/bin/$1"
  dpkg-deb --build --root-owner-group "$d" "$3/${1}_$2_all.deb" >/dev/null
}
mkdeb alpha 1.0 debs
mkdeb beta 2.0-1 debs
mkdeb gamma 3.0 debs-upper

cat >r.yaml <<'EOF'
image: exp
layers:
  - name: base
    sources:
      - dir: ./base
  - name: pkgs
    sources:
      - deb: ./debs/*.deb
  - name: files
    sources:
      - dir: ./upper
      - dir: ./owned
        dest: /srv/root-owned
      - dir: ./owned
        dest: /srv/source-owned
        owner: source
      - dir: ./owned
        dest: /srv/fixed
        owner: "7:8"
      - file: ./hello.sh
        dest: /usr/local/bin/hello
        mode: "0755"
      - file: ./hello.sh
        dest: /usr/share/doc/
      - file: ./hello.sh
        dest: /opt/src-owned.sh
        owner: source
      - archive: ./pkg.tar.xz
        dest: /opt/pkg
        strip: 1
      - archive: ./pkg.tar.xz
      - archive: ./owned.tar
        dest: /opt
    delete: [/etc/motd, /var/log, /etc/skel/.profile]
  - name: more
    sources:
      - deb: ./debs-upper/*.deb
EOF
S=$T/store
expect_ok st "$S" build r.yaml
expect_ok st "$S" export exp:latest "$T/ex"
E=$T/ex
cd "$E"

# stat -c '%a %u:%g' PATH == WANT
expect_meta() {
  local got
  got=$(stat -c '%a %u:%g' "$1")
  [ "$got" = "$2" ] || fail "$1: '$got', want '$2'"
}
expect_content() {
  [ -f "$1" ] || fail "$1 missing"
  [ "$(cat "$1")" = "$2" ] || fail "$1: '$(cat "$1")', want '$2'"
}

# --- whiteouts and replacement ---
[ ! -e etc/motd ] || fail "delete: /etc/motd still there"
[ ! -e var/log ] || fail "delete: /var/log (a directory) still there"
[ -d var ] || fail "/var went with /var/log"
[ ! -e etc/skel/.profile ] || fail "delete: /etc/skel/.profile still there"
[ -d etc/skel ] || fail "/etc/skel went with its file"
expect_content etc/keep keep
expect_content etc/replace-me new
expect_content usr/bin/tool "new tool"
# files of the packages below stay next to the replaced tool
expect_content usr/bin/alpha '#!/bin/sh'

# --- owners ---
expect_meta srv/root-owned/sub/f "644 0:0"
expect_meta srv/root-owned/sub "755 0:0"
[ "$(stat -c '%u:%g' -- srv/root-owned/link)" = 0:0 ] || fail "symlink in a dir source not root-owned"
expect_meta srv/source-owned/sub/f "644 1234:4321"
expect_meta srv/source-owned/sub "755 1234:4321"
[ "$(stat -c '%u:%g' -- srv/source-owned/link)" = 1234:4321 ] || fail "owner: source lost on a symlink"
[ "$(readlink srv/source-owned/link)" = sub/f ] || fail "symlink target"
expect_meta srv/fixed/sub/f "644 7:8"
expect_content srv/fixed/sub/f x
expect_meta opt/src-owned.sh "600 1234:4321"
# archives keep their owners and modes
expect_meta opt/a/owned-by-archive "640 555:666"

# --- file sources ---
expect_meta usr/local/bin/hello "755 0:0"
cmp -s usr/local/bin/hello "$W/hello.sh" || fail "file source content"
expect_meta usr/share/doc/hello.sh "600 0:0" # dest ending in /: base name kept, mode kept

# --- archives: dest + strip, and plain ---
expect_meta opt/pkg/bin/run "751 0:0"
expect_content opt/pkg/share/doc/README doc
[ "$(readlink opt/pkg/run-link)" = bin/run ] || fail "archive symlink"
[ ! -e opt/pkg/pkg-1.0 ] || fail "strip: 1 did not strip"
expect_content pkg-1.0/bin/run bin # no dest, no strip: at /

# --- Debian packages ---
for p in alpha beta gamma; do
  expect_content "usr/share/$p/data.txt" "$p data"
  expect_meta "usr/bin/$p" "755 0:0"
done
[ ! -e DEBIAN ] && [ ! -e control ] || fail "package control files leaked into the tree"
status=var/lib/dpkg/status
[ -f "$status" ] || fail "no dpkg status"
# one paragraph per package, each marked installed, with its own fields
"$PY" - "$status" <<'EOF' || fail "dpkg status: $(cat "$status")"
import sys
text = open(sys.argv[1]).read()
paras = [p for p in text.strip("\n").split("\n\n")]
want = {"alpha": "1.0", "beta": "2.0-1", "gamma": "3.0"}
got = {}
for p in paras:
    fields = dict(l.split(": ", 1) for l in p.split("\n") if not l.startswith(" "))
    assert fields.get("Status") == "install ok installed", p
    assert p.startswith("Package: "), p
    assert fields["Architecture"] == "all" and fields["Maintainer"], p
    assert fields["Package"] not in got, "duplicate " + fields["Package"]
    got[fields["Package"]] = fields["Version"]
assert got == want, got
# the lower layer's packages first, then the upper one's
assert [p.split("\n")[0] for p in paras] == ["Package: alpha", "Package: beta", "Package: gamma"], paras
assert text.endswith("\n") and not text.endswith("\n\n"), repr(text[-5:])
EOF
command -v dpkg-query >/dev/null &&
  { dpkg-query --admindir="$E/var/lib/dpkg" -W -f '${Package} ${Version} ${Status}\n' >"$T/dq" 2>"$T/dq.err" || fail "dpkg-query rejects the status: $(cat "$T/dq.err")"; }
if [ -s "$T/dq" ]; then
  printf 'alpha 1.0 install ok installed\nbeta 2.0-1 install ok installed\ngamma 3.0 install ok installed\n' |
    cmp -s - "$T/dq" || fail "dpkg-query: $(cat "$T/dq")"
fi
# the status in the pkgs layer alone has only the lower packages
expect_ok st "$S" inspect exp:latest
pk=$(awk '$1 == "pkgs" {print $2}' "$T/out")
expect_ok st "$S" layer unpack "$pk" "$T/pkgs-layer"
grep -c '^Package: ' "$T/pkgs-layer/var/lib/dpkg/status" | grep -qx 2 ||
  fail "pkgs layer status: $(cat "$T/pkgs-layer/var/lib/dpkg/status")"
grep -q '^Package: gamma' "$T/pkgs-layer/var/lib/dpkg/status" && fail "gamma in the lower status"

# --- the exported tree is exactly the composition ---
cd "$T"
expect_ok st "$S" build "$W/r.yaml" # all cached: same image
grep -q ' built ' "$T/out" && fail "rebuild built something: $(cat "$T/out")"
expect_ok st "$S" export exp:latest "$T/ex2"
assert_same_tree "$T/ex" "$T/ex2"
expect_ok st "$S" inspect exp:latest
expect_ok st "$S" export "$(awk '$1 == "digest" {print $2}' "$T/out")" "$T/ex3"
assert_same_tree "$T/ex" "$T/ex3"

# --- adding a package to a deb glob changes the layer and everything above ---
cp "$W/debs-upper/gamma_3.0_all.deb" "$W/debs/"
expect_ok st "$S" build "$W/r.yaml"
grep -qE '\] base +cached ' "$T/out" || fail "base not cached: $(cat "$T/out")"
grep -qE '\] pkgs +built ' "$T/out" || fail "pkgs not rebuilt for a new package: $(cat "$T/out")"
grep -qE '\] more +built ' "$T/out" || fail "more not rebuilt: $(cat "$T/out")"
expect_ok st "$S" store fsck
echo PASS
