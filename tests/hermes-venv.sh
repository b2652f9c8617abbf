#!/usr/bin/env bash
# The venv that runs Hermes' own Python gateway beside ours (tests/beside_hermes.rs, and the
# side-by-side bench's script): benches/hermes/requirements.txt (hermes-agent 0.18.2, the version of the
# reference in shared/, and every package it pulls in, each pinned with its hash) installed in
# target/hermes-venv; prints the venv's python. Made once (about a minute), then reused while the
# requirements file is the same (its sha256 in the venv's stamp).
set -euo pipefail
cd "$(dirname "$0")/.."
reqs=benches/hermes/requirements.txt
venv=${HERMES_BENCH_VENV:-target/hermes-venv}
stamp=$venv/.requirements.sha256
want=$(sha256sum "$reqs" | cut -d' ' -f1)
if [[ ! -x "$venv/bin/python" || "$(cat "$stamp" 2>/dev/null)" != "$want" ]]; then
  echo "hermes-venv: installing $reqs into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  # --no-deps: the file lists the whole set; --require-hashes: nothing else gets in.
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    --require-hashes --no-deps -r "$reqs" >&2
  "$venv/bin/python" -m pip check --disable-pip-version-check >&2
  echo "$want" >"$stamp"
fi
echo "$(cd "$venv" && pwd)/bin/python"
