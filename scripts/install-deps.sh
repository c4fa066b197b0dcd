#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages strata needs to build, test and benchmark.
# Idempotent: does nothing when every package is already installed.
set -euo pipefail

PACKAGES=(
  # build
  build-essential meson ninja-build pkg-config
  # libraries (DESIGN.md: libzstd, libarchive, OpenSSL, protobuf-c, libyaml)
  libzstd-dev libarchive-dev libssl-dev libprotobuf-c-dev protobuf-c-compiler libyaml-dev
  # OCI images: JSON documents, gzip layers, registry HTTP (README: Dependencies)
  libjansson-dev zlib1g-dev libdeflate-dev libcurl4-openssl-dev
  # run steps and environments are sandboxed with bubblewrap
  bubblewrap
  # gRPC server and client; the independent Python client of the tests; TLS test certificates
  libgrpc-dev protobuf-compiler protobuf-compiler-grpc python3-grpcio python3-protobuf openssl
  # the node store (docs/NODE.md): libostree, GLib; ostree (fsck) in tests
  libostree-dev ostree libglib2.0-dev
  # tests: archives and Debian packages as inputs, xattrs, valgrind
  libcmocka-dev valgrind attr zstd xz-utils bzip2 python3 util-linux procps dpkg-dev
  coreutils findutils diffutils binutils tar gzip
  # tests: the OCI tools that check published images
  skopeo umoci docker-registry
  # tests: registries with credentials (bcrypt htpasswd; a token server signing RS256 JWTs)
  apache2-utils python3-jwt python3-cryptography
)
if [ "${1:-}" = "--bench" ]; then
  PACKAGES+=(casync ostree zstd tar)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
