#!/usr/bin/env bash
# Configures (once) and builds neardup.
#   deploy/build.sh [BUILD_DIR] [meson setup options...]
# BUILD_DIR defaults to build/. Binaries: BUILD_DIR/server/neardupd and
# BUILD_DIR/server/neardup.
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-build}"
shift || true
if [[ ! -f "$dir/build.ninja" ]]; then
    meson setup "$dir" "$@"
fi
meson compile -C "$dir"
