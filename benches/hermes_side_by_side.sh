#!/usr/bin/env bash
# The side-by-side bench against Hermes' Python gateway (benches/hermes_side_by_side.rs says what
# it measures): makes sure target/hermes-venv holds exactly benches/hermes/requirements.txt
# (hermes-agent 0.18.2 from PyPI, every package pinned with its hash), then runs the bench with
# that venv's Python. Arguments go to the bench binary.
#
#   bash benches/hermes_side_by_side.sh                    # both wires, 30 model calls each
#   bash benches/hermes_side_by_side.sh --wire anthropic   # one wire (anthropic | openrouter)
#   bash benches/hermes_side_by_side.sh --dump DIR         # also write every request body to DIR
#   bash benches/hermes_side_by_side.sh --quiet-s 10       # wait longer for calls after the last turn
#
# Not run by CI. Needs python3 (3.11, with venv) and PyPI.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
reqs="$root/benches/hermes/requirements.txt"
venv="${HERMES_BENCH_VENV:-$root/target/hermes-venv}"
stamp="$venv/.requirements.sha256"
want=$(sha256sum "$reqs" | cut -d' ' -f1)

if [[ ! -x "$venv/bin/python" || ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    echo "hermes_side_by_side: installing $reqs into $venv" >&2
    rm -rf "$venv"
    python3 -m venv "$venv"
    # --no-deps: the file lists the whole set; --require-hashes: nothing else gets in.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --require-hashes --no-deps -r "$reqs"
    # Every requirement of every installed package is met (the list is complete).
    "$venv/bin/python" -m pip check --disable-pip-version-check
    echo "$want" >"$stamp"
fi

cd "$root"
exec cargo bench --bench hermes_side_by_side -- --hermes-python "$venv/bin/python" "$@"
