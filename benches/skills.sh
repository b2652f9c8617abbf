#!/usr/bin/env bash
# The skills bench with Hermes beside it (benches/skills.rs says what it measures): makes sure
# target/hermes-venv holds hermes-agent 0.18.2 (tests/hermes-venv.sh, every package pinned with
# its hash), so the bench can run Hermes' own prompt builder on the same skills, then runs it.
# Not run by CI. Needs python3 (3.11, with venv) and PyPI the first time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/tests/hermes-venv.sh" >/dev/null
cd "$root"
cargo build --release --bin tui-gateway
exec cargo bench --bench skills "$@"
