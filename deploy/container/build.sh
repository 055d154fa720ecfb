#!/usr/bin/env bash
# The steps of the container image (Dockerfile at the top of the tree), as one
# script: each RUN line of the Dockerfile is one step below, so the image's
# recipe also runs where no Docker engine does (CI runs the build and
# check-runtime steps: tests/integration/test_container.py).
#
#   build.sh build-deps                 apt: what building needs (deploy/install-deps.sh)
#   build.sh build SRC DESTDIR [BUILD]  meson release build of SRC in BUILD
#                                       (default SRC/build-container), installed
#                                       under DESTDIR with prefix /usr, stripped;
#                                       plus the health check and the settings file
#   build.sh check-runtime DESTDIR      every installed binary runs (its version) and
#                                       loads only libraries of runtime-packages.txt
#   build.sh runtime-deps [--clean]     apt: only the packages of runtime-packages.txt
#                                       (--clean: then remove apt's downloads, caches
#                                       and lists, for an image)
#   build.sh runtime-user               the unprivileged user neardup (uid 10001) and
#                                       its /var/lib/neardup
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
runtime_list="$here/runtime-packages.txt"
NEARDUP_UID=10001

die() {
    echo "build.sh: $*" >&2
    exit 1
}

runtime_packages() {
    grep -v '^\s*#' "$runtime_list" | grep -v '^\s*$'
}

apt_install() {
    local missing=()
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing+=("$p")
    done
    if ((${#missing[@]})); then
        echo "build.sh: installing ${missing[*]}"
        env DEBIAN_FRONTEND=noninteractive apt-get update -q
        env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            "${missing[@]}"
    fi
}

step_build_deps() {
    bash "$here/../install-deps.sh"
}

step_build() {
    local src="${1:?SRC}" dest="${2:?DESTDIR}"
    local build="${3:-$src/build-container}"
    src="$(cd "$src" && pwd)"
    mkdir -p "$dest"
    dest="$(cd "$dest" && pwd)"
    if [[ ! -f "$build/build.ninja" ]]; then
        meson setup "$build" "$src" --prefix=/usr --buildtype=release
    fi
    meson compile -C "$build" server/neardupd server/neardup
    meson install -C "$build" --destdir "$dest" --strip --no-rebuild
    install -D -m 0755 "$src/deploy/container/healthcheck.sh" \
        "$dest/usr/libexec/neardup/healthcheck"
    install -D -m 0644 "$src/deploy/neardupd.env" "$dest/usr/share/doc/neardup/neardupd.env"
}

# Spellings of a library path that dpkg may know it by (usrmerge).
spellings() {
    local f="$1" r
    r="$(readlink -f "$f")"
    printf '%s\n' "$f" "/usr$f" "${f#/usr}" "$r" "/usr$r" "${r#/usr}" | sort -u
}

step_check_runtime() {
    local dest="${1:?DESTDIR}"
    local allowed=" libc6 $(runtime_packages | tr '\n' ' ') "
    local bins=("$dest"/usr/bin/*)
    [[ -x "${bins[0]}" ]] || die "no binaries in $dest/usr/bin"
    local libs=()
    for b in "${bins[@]}"; do
        "$b" --version >/dev/null 2>&1 || "$b" version >/dev/null || die "$b does not run"
        if ldd "$b" | grep -q "not found"; then
            ldd "$b" >&2
            die "$b: a library is missing"
        fi
        mapfile -t -O "${#libs[@]}" libs < <(ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $3}')
    done
    mapfile -t libs < <(printf '%s\n' "${libs[@]}" | sort -u)
    # One dpkg query for every spelling of every library: "pkg:arch: path".
    declare -A owner=()
    local cands=()
    for lib in "${libs[@]}"; do
        mapfile -t -O "${#cands[@]}" cands < <(spellings "$lib")
    done
    while IFS= read -r line; do
        owner["${line#*: }"]="${line%%:*}"
    done < <(dpkg-query -S "${cands[@]}" 2>/dev/null || true)
    local bad=0
    for lib in "${libs[@]}"; do
        local pkg=""
        while read -r p; do
            [[ -n "${owner[$p]:-}" ]] && pkg="${owner[$p]}" && break
        done < <(spellings "$lib")
        [[ -n "$pkg" ]] || die "no package owns $lib"
        if [[ "$allowed" != *" $pkg "* ]]; then
            echo "build.sh: $lib comes from $pkg, which is not in $runtime_list" >&2
            bad=1
        fi
    done
    ((bad == 0)) || die "runtime libraries outside the runtime package list"
    echo "build.sh: ${#bins[@]} binaries need only: libc6 $(runtime_packages | tr '\n' ' ')"
}

step_runtime_deps() {
    mapfile -t pkgs < <(runtime_packages)
    apt_install "${pkgs[@]}"
    if [[ "${1:-}" == "--clean" ]]; then # in an image: drop apt's caches and lists
        apt-get clean
        rm -rf /var/lib/apt/lists/*
    fi
}

step_runtime_user() {
    getent group neardup >/dev/null || groupadd --system --gid "$NEARDUP_UID" neardup
    getent passwd neardup >/dev/null ||
        useradd --system --uid "$NEARDUP_UID" --gid neardup --home-dir /var/lib/neardup \
            --no-create-home --shell /usr/sbin/nologin neardup
    install -d -m 0700 -o neardup -g neardup /var/lib/neardup
}

step="${1:-}"
shift || true
case "$step" in
    build-deps) step_build_deps "$@" ;;
    build) step_build "$@" ;;
    check-runtime) step_check_runtime "$@" ;;
    runtime-deps) step_runtime_deps "$@" ;;
    runtime-user) step_runtime_user "$@" ;;
    *) die "usage: build.sh build-deps | build SRC DESTDIR [BUILD] | check-runtime DESTDIR | runtime-deps | runtime-user" ;;
esac
