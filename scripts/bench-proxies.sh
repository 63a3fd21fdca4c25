#!/usr/bin/env bash
# phasescope side by side with HAProxy (mode http and mode tcp) and nginx, in front of a
# fixed-response upstream and of Webdis + Redis; writes docs/BENCHMARKS.md and its chart.
#
#   scripts/bench-proxies.sh            # full run, ~10 minutes
#   scripts/bench-proxies.sh --quick    # ~2 minutes
#   scripts/bench-proxies.sh --sampler-only   # ~1 minute: the upstream sampler's cost only,
#                                             # written into the last full run's documents
#   scripts/bench-proxies.sh --chain-only     # ~2 minutes: the full chain in front of Webdis
#                                             # (HTTP tap, RESP tap, correlated; with and without
#                                             # profile = true, HAProxy, direct), likewise
#   scripts/bench-proxies.sh --help     # every option
#
# Installs the tools it needs from Debian when they are missing, builds in release mode,
# then hands over to scripts/bench_proxies.py. Everything runs on loopback ports it picks;
# no system service is used.
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
export DEBIAN_FRONTEND=noninteractive

for arg in "$@"; do
    if [ "$arg" = "-h" ] || [ "$arg" = "--help" ]; then
        exec python3 scripts/bench_proxies.py --help
    fi
done

packages=(wrk haproxy nginx valgrind redis-server webdis python3)
installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'
}
missing=()
for package in "${packages[@]}"; do
    installed "$package" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
    echo "==> installing ${missing[*]}" >&2
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
    # Some of these start a daemon on install; the benchmark uses its own instances.
    for service in redis-server webdis nginx haproxy; do
        if [ -x "/etc/init.d/$service" ]; then
            $sudo service "$service" stop >/dev/null 2>&1 || true
        fi
    done
fi

echo "==> building (release)" >&2
cargo build --release --quiet --bins

# The tail at one connection is a script of its own (it reuses the proxies' setup).
for arg in "$@"; do
    if [ "$arg" = "--tail-only" ]; then
        exec python3 scripts/bench_tail.py "$@"
    fi
done
exec python3 scripts/bench_proxies.py "$@"
