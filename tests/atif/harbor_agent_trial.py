"""One Harbor trial of integrations/harbor's agent, on a test double of Harbor's environment.

Harbor's own environments need docker or a cloud sandbox; this double (``LocalEnvironment``)
offers the same calls the agent and its base class make (``exec``, ``upload_file``,
``download_dir``, ``default_user``) and runs them on this machine, in a root directory of its
own that stands for the container's file system: the environment's absolute paths the agent
uses (``/installed-agent``, ``/logs``) are that root's, commands run in ``ROOT/app`` (the
task's working directory) with ``HOME`` and ``TMPDIR`` inside the root. The trial is driven
as Harbor's ``Trial`` drives an agent: ``setup``, ``run``, the agent logs downloaded to the
host's logs directory, ``populate_context_post_run``.

usage: python harbor_agent_trial.py ROOT JSON_SPEC   (spec: binary, model, instruction,
kwargs, extra_env); prints one JSON line: the context, the agent's version, the commands run,
the run's environment names, or the error raised.
"""

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath

from harbor.environments.base import ExecResult
from harbor.models.agent.context import AgentContext

from tui_gateway_agent import TuiGateway

MAPPED = ("/installed-agent", "/logs")


class LocalEnvironment:
    """Harbor's environment interface, run locally under ``root``."""

    default_user = None

    def __init__(self, root: Path):
        self.root = root
        self.workdir = root / "app"
        for d in ("app", "home", "tmp", "logs/agent"):
            (root / d).mkdir(parents=True, exist_ok=True)
        self.commands: list[dict] = []

    def path(self, remote: str) -> Path:
        for prefix in MAPPED:
            if remote == prefix or remote.startswith(prefix + "/"):
                return Path(str(self.root) + remote)
        raise AssertionError(f"the agent used a path outside the double's root: {remote}")

    def command(self, command: str) -> str:
        for prefix in MAPPED:
            command = command.replace(prefix, str(self.root) + prefix)
        return command

    async def exec(self, command, cwd=None, env=None, timeout_sec=None, user=None):
        self.commands.append(
            {"command": command, "user": user, "env": sorted((env or {}).keys())}
        )
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.root / "home"),
            "TMPDIR": str(self.root / "tmp"),
            **(env or {}),
        }
        done = await asyncio.to_thread(
            subprocess.run,
            ["bash", "-c", self.command(command)],
            cwd=self.path(cwd) if cwd else self.workdir,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout_sec or 120,
        )
        return ExecResult(
            stdout=done.stdout, stderr=done.stderr, return_code=done.returncode
        )

    async def upload_file(self, source_path, target_path):
        target = self.path(str(target_path))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source_path, target)

    async def download_dir(self, source_dir, target_dir):
        shutil.copytree(self.path(str(source_dir)), target_dir, dirs_exist_ok=True)


async def trial(root: Path, spec: dict) -> dict:
    env = LocalEnvironment(root)
    host_logs = root / "host-logs"
    host_logs.mkdir()
    out: dict = {"commands": env.commands}
    try:
        agent = TuiGateway(
            logs_dir=host_logs,
            model_name=spec.get("model"),
            extra_env=spec.get("extra_env"),
            **({"binary": spec["binary"]} if spec.get("binary") else {}),
            **spec.get("kwargs", {}),
        )
        await agent.setup(env)
        context = AgentContext()
        try:
            await agent.run(spec["instruction"], env, context)
        finally:
            # What Harbor's Trial does after the run, also after a failed one.
            await env.download_dir(str(agent.environment_logs_dir), host_logs)
            agent.populate_context_post_run(context)
            out["context"] = context.model_dump()
            out["version"] = agent.version()
    except Exception as e:  # the test reads which error Harbor would record
        out["error"] = f"{type(e).__name__}: {e}"
    return out


if __name__ == "__main__":
    root = Path(sys.argv[1])
    spec = json.loads(sys.argv[2])
    print(json.dumps(asyncio.run(trial(root, spec))), flush=True)
