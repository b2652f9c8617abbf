#!/usr/bin/env bash
# 1,000 offline tasks in 4 shards (4 `exec --tasks --shard I/4` processes at once, each its own
# HERMES_HOME, then `exec merge --sessions`) against one `exec --tasks --parallel 4`:
#   bash benches/exec_shards.sh [TASKS] [SHARDS] [GATEWAY]   (default 1000 4 target/release/tui-gateway)
# The same concurrency both ways (SHARDS sessions at a time). Prints wall time, tasks per
# second and CPU per task (user + system of every process, as /usr/bin/time sees them) of
# each way, and the merge's own time.
set -euo pipefail
cd "$(dirname "$0")/.."
tasks=${1:-1000}
shards=${2:-4}
gateway=$(realpath "${3:-target/release/tui-gateway}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq "$tasks"); do
  printf '{"id":"t%d","prompt":"task %d: say a few words back"}\n' "$i" "$i"
done > "$work/tasks.jsonl"

measure() { # wall, user, system seconds of `$@` and its children
  /usr/bin/time -o "$work/time" -f '%e %U %S' "$@" >"$work/stdout" 2>"$work/stderr" ||
    { echo "failed: $*" >&2; tail -5 "$work/stderr" >&2; exit 1; }
  cat "$work/time"
}
report() { # name wall user sys
  awk -v name="$1" -v n="$tasks" -v wall="$2" -v u="$3" -v s="$4" 'BEGIN {
    printf "%-40s %6.2f s wall %8.1f tasks/s %6.2f ms CPU/task\n", name, wall, n / wall, (u + s) * 1000 / n }'
}

one() {
  HERMES_HOME="$work/home-one" "$gateway" exec --tasks "$work/tasks.jsonl" --parallel "$shards" \
    --results "$work/one.results.jsonl" --workdir "$work/wd-one"
}
sharded() {
  for i in $(seq 0 $((shards - 1))); do
    HERMES_HOME="$work/home-$i" "$gateway" exec --tasks "$work/tasks.jsonl" --shard "$i/$shards" \
      --parallel 1 >/dev/null &
  done
  wait
}
export -f one sharded; export work gateway shards
read -r w1 u1 s1 < <(measure bash -c one)
report "one process, --parallel $shards" "$w1" "$u1" "$s1"
read -r w2 u2 s2 < <(measure bash -c sharded)
report "$shards shard processes, --parallel 1 each" "$w2" "$u2" "$s2"
read -r w3 u3 s3 < <(measure "$gateway" exec merge --sessions "$work/merged/state.db" \
  "$work"/tasks.shard-*-of-"$shards".results.jsonl)
done=$(grep -o '"done":[0-9]*' "$work/stdout" | head -1)
echo "merge --sessions: $w3 s wall, $(awk "BEGIN {print $u3 + $s3}") s CPU; $done"
[ "$done" = "\"done\":$tasks" ] || { echo "the shards did not finish every task" >&2; exit 1; }
