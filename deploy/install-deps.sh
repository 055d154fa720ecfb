#!/usr/bin/env bash
# Installs what neardup needs on Debian 12 (bookworm).
#   deploy/install-deps.sh           build and run the server
#   deploy/install-deps.sh --test    also everything the test suite uses
# Uses sudo when not run as root. Safe to run again.
set -euo pipefail

# Checked on a `debootstrap --variant=minbase bookworm` root by CI
# (tests/fresh/run.sh), not only on machines that already have things:
# gcc only recommends libc6-dev (crt files, C headers), so it is named here.
build_pkgs=(gcc libc6-dev meson ninja-build pkg-config
            libevent-dev libjansson-dev libxxhash-dev libutf8proc-dev liblmdb-dev
            libjemalloc-dev zlib1g-dev libnats-dev
            libzstd-dev # the store's kept texts, compressed (server/store/text_pack.c)
            libopencc-dev libicu-dev # the normalizer's folds: OpenCC t2s, ICU
            libcurl4-openssl-dev libssl-dev) # webhooks: libcurl's multi interface, HMAC-SHA256
test_pkgs=(python3 python3-yaml python3-jsonschema curl gzip procps lmdb-utils haproxy prometheus systemd
           nats-server # tests/integration/test_replicas.py: a 3-server JetStream cluster
           iproute2 iptables # test_history.py: a NATS server in its own network namespace, its routes cut
           opencc # tests/integration/test_evasion.py: Traditional/Simplified copies made by OpenCC itself
           clang libclang-rt-14-dev # clang + libFuzzer runtime: tests/fuzz/run.sh
           chromium chromium-driver python3-selenium # tests/integration/test_console.py
           fonts-wqy-microhei # its screenshots: Chinese glyphs (1.6 MB; fonts-noto-cjk is 56 MB)
           debootstrap podman runc systemd-container) # tests/fresh/run.sh

# tests/integration/test_contract.py reads proto/openapi.yaml with tools
# from npm (pinned by tests/contract/package-lock.json; tests/contract/install.sh
# installs them) on Debian's Node.js, unless the machine has node and npm
# already (NodeSource's nodejs bundles npm and conflicts with Debian's npm).
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    test_pkgs+=(nodejs npm)
fi

pkgs=("${build_pkgs[@]}")
if [[ "${1:-}" == "--test" ]]; then
    pkgs+=("${test_pkgs[@]}")
fi

sudo=""
if [[ "$(id -u)" -ne 0 ]]; then
    sudo="sudo"
fi

missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "install-deps: installing ${missing[*]}"
    # The test suite runs its own haproxy, promtool and friends on loopback:
    # keep the packages' system services from starting while they install.
    policy=/usr/sbin/policy-rc.d
    if [[ "${1:-}" == "--test" && ! -e "$policy" ]]; then
        printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
        $sudo chmod 755 "$policy"
        trap '$sudo rm -f "$policy"' EXIT
    fi
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get update -q
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
