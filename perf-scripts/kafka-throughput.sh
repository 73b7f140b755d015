#!/usr/bin/env bash
# Throughput of `lockgate kafka run` (one process, bounded, exactly-once
# checkpoints every 100 ms, at-least-once sink) beside `lockgate loadgen
# --workload w1` on the same record count, against a fresh tansu broker
# (SQLite storage) on a free loopback port. The broker dominates: the
# ratio says by how much.
#
# usage: perf-scripts/kafka-throughput.sh [-r RECORDS] [-p PARTITIONS]
set -euo pipefail

records=1000000
partitions=4
usage() {
  echo "usage: $0 [-r RECORDS (default 1000000)] [-p PARTITIONS (default 4)]"
}
while getopts "r:p:h" opt; do
  case $opt in
    r) records=$OPTARG ;;
    p) partitions=$OPTARG ;;
    h) usage; exit 0 ;;
    *) usage; exit 2 ;;
  esac
done
tansu=$(command -v tansu || echo "$HOME/.cargo/bin/tansu")
[ -x "$tansu" ] || { echo "tansu not found: cargo install tansu --version 0.6.0 --features libsql --locked" >&2; exit 3; }
cd "$(dirname "$0")/.."
cargo build --release -q -p lockgate-cli
bin=$PWD/target/release/lockgate
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# tansu resolves sqlite:// paths against its working folder.
(cd "$work" && exec "$tansu" broker --listener-url "tcp://127.0.0.1:$port" \
  --advertised-listener-url "tcp://127.0.0.1:$port" --storage-engine sqlite://tansu.db \
  >"$work/tansu.log" 2>&1) &
broker=$!
trap 'kill "$broker" 2>/dev/null; rm -rf "$work"' EXIT
bs=127.0.0.1:$port
for _ in $(seq 1 100); do
  "$bin" kafka produce --bootstrap "$bs" --topic in --partitions "$partitions" --records 0 >/dev/null 2>&1 && break
  sleep 0.1
done
echo "== produce $records records into $partitions partitions"
"$bin" kafka produce --bootstrap "$bs" --topic in --partitions "$partitions" --records "$records"
echo "== kafka run, 1 process"
start=$(date +%s.%N)
"$bin" kafka run --bootstrap "$bs" --input in --output out --bounded \
  --checkpoint-dir "$work/chk" | grep -E '^(kafka run|result|  checkpoints)'
end=$(date +%s.%N)
"$bin" kafka verify --bootstrap "$bs" --topic out --records "$records" --guarantee at-least-once | tail -1
echo "== loadgen w1, same records"
"$bin" loadgen --workload w1 --records "$records" --quiet --json "$work/w1.json" >/dev/null
python3 - "$work/w1.json" "$records" "$start" "$end" <<'PY'
import json, sys
w1 = json.load(open(sys.argv[1]))["records_per_s"]
kafka = int(sys.argv[2]) / (float(sys.argv[4]) - float(sys.argv[3]))
print(f"loadgen w1: {w1:,.0f} records/s; kafka run (wall, start to end): {kafka:,.0f} records/s; ratio {w1 / kafka:,.0f}x")
PY
