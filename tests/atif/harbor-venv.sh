#!/usr/bin/env bash
# A venv with Harbor's own ATIF models (pinned), for the tests that validate trajectories:
# prints the venv's python. Cached under target/: a rerun with the same pins does nothing.
# Harbor declares Python >= 3.12 and pulls a cloud SDK stack; its ATIF models and validator
# (harbor.models.trajectories, harbor.utils.trajectory_validator) need only pydantic, so the
# wheel goes in without its dependencies (and on the 3.11 here), beside a pinned pydantic.
# Its agent classes (harbor.agents.installed.base, which integrations/harbor's agent extends)
# use 3.12 syntax: with a Python 3.12 on the machine (PATH or pyenv) the venv is made with it
# and gets the few modules those classes import, pinned; without one the agent's test says so.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=python3
for candidate in python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12; do
  # (a pyenv shim is on PATH even where it runs nothing)
  if "$candidate" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1; then
    python=$candidate
    break
  fi
done
agent_pins="toml==0.10.2 shortuuid==1.0.13 platformdirs==4.14.9 jinja2==3.1.6 markupsafe==3.0.4"
pins="harbor==0.26.0 pydantic==2.14.4 $python"
if [ "$python" != python3 ]; then
  pins="$pins $agent_pins"
fi
venv=target/harbor-venv
if [ "$(cat "$venv/.pins" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$venv"
  "$python" -m venv "$venv" >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check pydantic==2.14.4 >&2
  "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps --ignore-requires-python harbor==0.26.0 >&2
  if [ "$python" != python3 ]; then
    # shellcheck disable=SC2086 # the pins are words
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps $agent_pins >&2
    "$venv/bin/python" -c 'import harbor.agents.installed.base' >&2
  fi
  "$venv/bin/python" -c 'import harbor.utils.trajectory_validator' >&2
  echo "$pins" >"$venv/.pins"
fi
echo "$PWD/$venv/bin/python"
