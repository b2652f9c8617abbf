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
# The pinned venv the tests run Hermes' gateway from (made once, reused while the pins stay).
python=$("$root/tests/hermes-venv.sh")

cd "$root"
exec cargo bench --bench hermes_side_by_side -- --hermes-python "$python" "$@"
