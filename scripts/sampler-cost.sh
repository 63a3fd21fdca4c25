#!/usr/bin/env bash
# What sampling costs Webdis on the full chain (client → phasescope → Webdis →
# phasescope's RESP tap → Redis), measured on one running chain: `phasescope bench
# --profile-cost` alternates unsampled and sampled windows (A B B A …, Webdis sampled on
# demand) and gives each pair's requests/s ratio, their median and the ratio's 95 %
# interval. docs/BENCHMARKS.md has the figures and the command that made them.
#
#   scripts/sampler-cost.sh                       # 20 windows of 5 s a side, the default budget
#   scripts/sampler-cost.sh --sample-budget 0     # at the full 997 Hz
#   scripts/sampler-cost.sh --runs 4 --duration 2s --format json
#
# Every flag is passed to `phasescope bench --profile-cost` (see `phasescope bench
# --help`). PHASESCOPE names the binary (default: target/release/phasescope, built if
# missing). Needs redis-server, redis-cli and webdis, and permission to open perf events
# on Webdis (root, or CAP_PERFMON: docs/deploy.md).
set -euo pipefail
cd "$(dirname "$0")/.."

bin=${PHASESCOPE:-target/release/phasescope}
if [[ -z ${PHASESCOPE:-} && ! -x $bin ]]; then
    cargo build --release --bin phasescope
fi
for tool in redis-server redis-cli webdis; do
    command -v "$tool" >/dev/null || { echo "sampler-cost: $tool is not installed" >&2; exit 2; }
done

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

dir=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

redis_port=$(free_port)
resp_port=$(free_port)
http_port=$(free_port)

redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    --daemonize no --dir "$dir" --logfile "$dir/redis.log" &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$redis_port" PING >/dev/null 2>&1 && break; sleep 0.1; done
redis-cli -p "$redis_port" SET bench hello >/dev/null

# Webdis reaches Redis through the bench's RESP tap (it retries its pool until the tap
# listens): 2 threads, a pool of 4 each, as in docs/BENCHMARKS.md's chain.
cat >"$dir/webdis.json" <<EOF
{"redis_host": "127.0.0.1", "redis_port": $resp_port, "http_host": "127.0.0.1",
 "http_port": $http_port, "threads": 2, "pool_size": 4, "daemonize": false,
 "websockets": false, "database": 0, "verbosity": 3, "logfile": "$dir/webdis.log"}
EOF
webdis "$dir/webdis.json" &
pids+=($!)
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$http_port") 2>/dev/null && break; sleep 0.1; done

echo "sampler-cost: $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
"$bin" bench --profile-cost --a "127.0.0.1:$http_port" \
    --a-resp "127.0.0.1:$resp_port=127.0.0.1:$redis_port" --path /GET/bench "$@"
echo "sampler-cost: done, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
