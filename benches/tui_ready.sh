#!/usr/bin/env bash
# How long the stock Hermes TUI takes from spawn to "ready" (its status bar) on this gateway:
# bash benches/tui_ready.sh [RUNS] [GATEWAY] — prints one line a run and the median.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5}
gateway=${2:-target/release/tui-gateway}
bundle=${HERMES_TUI_BUNDLE:-../shared/hermes-reference/tui/entry.js}
gateway=$(realpath "$gateway"); bundle=$(realpath "$bundle")
sock="tui-ready-$$"
times=()
for i in $(seq "$runs"); do
  home=$(mktemp -d); mkdir -p "$home/ws"
  t0=$(date +%s%N)
  tmux -L "$sock" new-session -d -s r -x 120 -y 40 \
    "env HERMES_HOME=$home HERMES_CWD=$home/ws HERMES_PYTHON=$gateway TERM=xterm-256color NODE_ENV=production node --expose-gc $bundle"
  deadline=$((t0 + 20000000000))
  until tmux -L "$sock" capture-pane -p -t r 2>/dev/null | grep -q "─ ready │"; do
    [ "$(date +%s%N)" -lt "$deadline" ] || { echo "run $i: not ready within 20 s"; exit 1; }
    sleep 0.005
  done
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 )); times+=("$ms"); echo "run $i: ready after $ms ms"
  tmux -L "$sock" send-keys -t r -l '/quit'; sleep 0.2; tmux -L "$sock" send-keys -t r Enter
  for _ in $(seq 100); do tmux -L "$sock" has-session -t r 2>/dev/null || break; sleep 0.02; done
  tmux -L "$sock" kill-server 2>/dev/null || true
  rm -rf "$home"
done
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print "median: " a[int((NR+1)/2)] " ms over " NR " runs"}'
