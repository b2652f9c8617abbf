#!/usr/bin/env bash
# `exec --tasks` against one `exec` process per task, on the offline model:
#   bash benches/exec_tasks.sh [TASKS] [PARALLEL] [GATEWAY]     (default 1000 50 target/release/tui-gateway)
# Each task is a prompt the offline model answers in words (no tool: the CPU measured is the
# gateway's and exec's own). Prints, for each way, tasks per second and CPU per task (user +
# system of the processes, as /usr/bin/time sees them), and their ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
tasks=${1:-1000}
parallel=${2:-50}
gateway=$(realpath "${3:-target/release/tui-gateway}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for i in $(seq "$tasks"); do
  prompt="task $i: say a few words back"
  printf '{"id":"t%d","prompt":"%s"}\n' "$i" "$prompt"
done > "$work/tasks.jsonl"
sed -E 's/.*"prompt":"(.*)"\}/\1/' "$work/tasks.jsonl" > "$work/prompts.txt"

# Wall seconds, user + system CPU seconds of `$@` and all its children.
measure() {
  /usr/bin/time -o "$work/time" -f '%e %U %S' "$@" >/dev/null 2>"$work/stderr" ||
    { echo "failed: $*" >&2; tail -5 "$work/stderr" >&2; exit 1; }
  cat "$work/time"
}
report() { # name wall user sys
  awk -v name="$1" -v n="$tasks" -v wall="$2" -v u="$3" -v s="$4" 'BEGIN {
    printf "%-34s %8.1f tasks/s %8.2f ms CPU/task  (%.2f s wall, %.2f s CPU)\n", name, n / wall, (u + s) * 1000 / n, wall, u + s }'
}

export HERMES_HOME="$work/home-batch"
read -r w1 u1 s1 < <(measure "$gateway" exec --tasks "$work/tasks.jsonl" --parallel "$parallel" \
  --results "$work/results.jsonl" --workdir "$work/wd-batch")
done=$(grep -c '"status":"done"' "$work/results.jsonl")
[ "$done" -eq "$tasks" ] || { echo "only $done of $tasks tasks done"; exit 1; }
report "exec --tasks --parallel $parallel" "$w1" "$u1" "$s1"

export HERMES_HOME="$work/home-each"
mkdir -p "$work/wd-each"
one_each() {
  cd "$work/wd-each"
  # Each process's record goes to stderr; a failed one is counted below, not fatal.
  tr '\n' '\0' < "$work/prompts.txt" | xargs -0 -P "$parallel" -n 1 "$gateway" exec -- \
    2>"$work/each.stderr" || true
}
export -f one_each; export work gateway parallel
read -r w2 u2 s2 < <(measure bash -c one_each)
report "one exec per task, $parallel at a time" "$w2" "$u2" "$s2"
done=$(grep -c '"status":"done"' "$work/each.stderr" || true)
[ "$done" -eq "$tasks" ] || { echo "one exec per task: only $done of $tasks done:"; grep -v '^{\|^\[gateway' "$work/each.stderr" | sort | uniq -c | head; }

awk -v w1="$w1" -v c1="$(awk "BEGIN {print $u1 + $s1}")" -v w2="$w2" -v c2="$(awk "BEGIN {print $u2 + $s2}")" 'BEGIN {
  printf "ratio: %.1fx the tasks per second, %.1fx less CPU per task\n", w2 / w1, c2 / c1 }'
