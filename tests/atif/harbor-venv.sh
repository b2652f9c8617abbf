#!/usr/bin/env bash
# A venv with Harbor's own ATIF models (pinned), for the tests that validate trajectories:
# prints the venv's python. Cached under target/: a rerun with the same pins does nothing.
# Harbor declares Python >= 3.12 and pulls a cloud SDK stack; its ATIF models and validator
# (harbor.models.trajectories, harbor.utils.trajectory_validator) need only pydantic, so the
# wheel goes in without its dependencies (and on the 3.11 here), beside a pinned pydantic.
set -euo pipefail
cd "$(dirname "$0")/../.."
pins="harbor==0.26.0 pydantic==2.14.4"
venv=target/harbor-venv
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  python3 -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check pydantic==2.14.4 >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --ignore-requires-python harbor==0.26.0 >&2
  "$venv/bin/python" -c 'import harbor.utils.trajectory_validator' >&2
  echo "$pins" >"$venv/.pins"
fi
echo "$PWD/$venv/bin/python"
