"""tui-gateway as a Harbor installed agent (Harbor 0.26).

    PYTHONPATH=integrations/harbor harbor run -d terminal-bench@2.0 -e docker \\
        --agent-import-path tui_gateway_agent:TuiGateway -m anthropic/claude-sonnet-4-5 \\
        --ak binary=target/x86_64-unknown-linux-musl/release/tui-gateway

Each trial: ``install`` puts the binary in the trial's environment (uploaded from this machine,
``binary=PATH``, or downloaded there, ``binary_url=URL``); ``run`` runs ``tui-gateway exec`` once
with the trial's instruction (on stdin), the model as ``--provider``/``--model`` and the keys in
Hermes' variable names, and writes the ATIF trajectory straight into Harbor's agent logs
directory (``/logs/agent/trajectory.json``), with the stream-json lines and the result record
beside it. ``populate_context_post_run`` reads the tokens and cost back from the trajectory.
See docs/EXEC.md "Harbor".
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.agents.capabilities import AgentCapabilities
from harbor.agents.installed.base import BaseInstalledAgent, with_prompt_template
from harbor.environments.base import BaseEnvironment
from harbor.models.agent.context import AgentContext

# The variables the gateway reads a provider's key or endpoint from (Hermes' names,
# src/model/providers.rs): those set for Harbor (its --ae, or this process's environment)
# are passed to the run. The gateway hands them to its model client only, never to a tool.
KEY_VARS = (
    "OPENROUTER_API_KEY",
    "OPENROUTER_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_TOKEN",
    "ANTHROPIC_BASE_URL",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "GEMINI_BASE_URL",
    "DEEPSEEK_API_KEY",
    "DEEPSEEK_BASE_URL",
    "XAI_API_KEY",
    "XAI_BASE_URL",
    "GLM_API_KEY",
    "ZAI_API_KEY",
    "Z_AI_API_KEY",
    "GLM_BASE_URL",
    "KIMI_API_KEY",
    "KIMI_CODING_API_KEY",
    "KIMI_CN_API_KEY",
    "KIMI_BASE_URL",
    "MINIMAX_API_KEY",
    "MINIMAX_BASE_URL",
    "MINIMAX_CN_API_KEY",
    "MINIMAX_CN_BASE_URL",
    "DASHSCOPE_API_KEY",
    "DASHSCOPE_BASE_URL",
    "NVIDIA_API_KEY",
    "NVIDIA_BASE_URL",
    "HF_TOKEN",
    "HF_BASE_URL",
    "STEPFUN_API_KEY",
    "ARCEEAI_API_KEY",
    "GMI_API_KEY",
    "KILOCODE_API_KEY",
    "OPENCODE_ZEN_API_KEY",
    "OPENCODE_GO_API_KEY",
    "XIAOMI_API_KEY",
    "TOKENHUB_API_KEY",
    "OLLAMA_API_KEY",
    "OLLAMA_BASE_URL",
    "AZURE_FOUNDRY_API_KEY",
    "AZURE_FOUNDRY_BASE_URL",
    "CUSTOM_BASE_URL",
)

APPROVE_MODES = ("never", "always", "ask-fails")


class TuiGateway(BaseInstalledAgent):
    """Runs ``tui-gateway exec`` in the trial's environment and collects its ATIF trajectory."""

    capabilities = AgentCapabilities(atif=True)

    # Where the binary goes in the environment (Harbor's setup creates this directory).
    INSTALL_DIR = PurePosixPath("/installed-agent")
    # The gateway's home in the environment: state.db and its journal. Under $TMPDIR (else
    # /tmp), not the logs directory, which may be a bind mount SQLite should not lock across.
    HOME_DIR = '"${TMPDIR:-/tmp}/tui-gateway-home"'

    def __init__(
        self,
        logs_dir: Path,
        *args: Any,
        binary: str | None = None,
        binary_url: str | None = None,
        max_turns: int | str | None = None,
        timeout: float | str | None = None,
        approve: str | None = None,
        **kwargs: Any,
    ):
        super().__init__(logs_dir, *args, **kwargs)
        self._binary = binary or self._get_env("TUI_GATEWAY_BINARY")
        self._binary_url = binary_url or self._get_env("TUI_GATEWAY_BINARY_URL")
        self._max_turns = _positive_int("max_turns", max_turns)
        self._timeout = _seconds("timeout", timeout)
        self._approve = approve or "always"
        if self._approve not in APPROVE_MODES:
            raise ValueError(
                f"approve={self._approve!r}: give one of {', '.join(APPROVE_MODES)}"
            )

    @staticmethod
    def name() -> str:
        return "tui-gateway"

    @property
    def executable(self) -> PurePosixPath:
        return self.INSTALL_DIR / "tui-gateway"

    async def install(self, environment: BaseEnvironment) -> None:
        target = shlex.quote(str(self.executable))
        if self._binary:
            source = Path(self._binary)
            if not source.is_file():
                raise ValueError(f"binary={self._binary}: no such file")
            await environment.upload_file(source, str(self.executable))
            await self.exec_as_root(environment, f"chmod 0755 {target}")
        elif self._binary_url:
            await self.ensure_system_dependencies(environment, ("curl",))
            await self.exec_as_root(
                environment,
                f"curl -fsSL -o {target} {shlex.quote(self._binary_url)} "
                f"&& chmod 0755 {target}",
            )
        else:
            raise ValueError(
                "tui-gateway: give the binary to install: --ak binary=PATH (a Linux "
                "build that runs in the task's image, e.g. a musl one) or "
                "--ak binary_url=URL (TUI_GATEWAY_BINARY / TUI_GATEWAY_BINARY_URL)"
            )
        # A binary that cannot run in this image (another libc, another CPU) fails here.
        await self.exec_as_agent(environment, f"{target} exec --help >/dev/null")

    @staticmethod
    def _parse_model_name_for_connection(
        model_name: str, *, skip_model_parsing: bool = False
    ) -> tuple[str | None, str]:
        """``provider/model``, the provider one of Hermes' ids or aliases (the gateway's
        ``--provider``; ``openai`` is the OpenAI API itself), not LiteLLM's catalog."""
        provider, sep, model = model_name.partition("/")
        if skip_model_parsing or not sep:
            return None, model_name
        return provider, model

    def _model_flags(self) -> list[str]:
        if not self.model_name:
            return []
        provider, model = self._parse_model_name(self.model_name)
        flags = ["--provider", provider] if provider else []
        if model:
            flags += ["--model", model]
        return flags

    def exec_command(self) -> str:
        """The shell command a trial runs: the instruction on stdin, stdout (stream-json)
        and stderr (diagnostics, then the result record) into the logs directory, the tail
        of stderr echoed so Harbor can classify a failure."""
        logs = self.environment_logs_dir
        args = [
            "exec",
            "-",
            "--atif",
            str(logs),
            "--output-format",
            "stream-json",
            "--approve",
            self._approve,
            *self._model_flags(),
        ]
        if self._max_turns is not None:
            args += ["--max-turns", str(self._max_turns)]
        if self._timeout is not None:
            args += ["--timeout", str(self._timeout)]
        stream = shlex.quote(str(logs / "tui-gateway.stream.jsonl"))
        stderr = shlex.quote(str(logs / "tui-gateway.stderr.txt"))
        return (
            f'export HERMES_HOME={self.HOME_DIR} && mkdir -p "$HERMES_HOME" '
            f"{shlex.quote(str(logs))} && "
            f'printf "%s" "$TUI_GATEWAY_INSTRUCTION" | '
            f"{shlex.quote(str(self.executable))} {shlex.join(args)} "
            f">{stream} 2>{stderr}; rc=$?; tail -c 4000 {stderr} >&2; exit $rc"
        )

    def run_env(self, instruction: str) -> dict[str, str]:
        env = {"TUI_GATEWAY_INSTRUCTION": instruction}
        for name in KEY_VARS:
            value = self._get_env(name)
            if value:
                env[name] = value
        return env

    @with_prompt_template
    async def run(
        self,
        instruction: str,
        environment: BaseEnvironment,
        context: AgentContext,
    ) -> None:
        await self.exec_as_agent(
            environment, self.exec_command(), env=self.run_env(instruction)
        )

    def populate_context_post_run(self, context: AgentContext) -> None:
        path = self.logs_dir / "trajectory.json"
        try:
            trajectory = json.loads(path.read_text())
        except (OSError, ValueError):
            return
        agent = trajectory.get("agent") or {}
        if agent.get("version"):
            self._version = agent["version"]
        totals = trajectory.get("final_metrics") or {}
        context.n_input_tokens = totals.get("total_prompt_tokens")
        context.n_cache_tokens = totals.get("total_cached_tokens")
        context.n_output_tokens = totals.get("total_completion_tokens")
        context.cost_usd = totals.get("total_cost_usd")


def _positive_int(name: str, value: int | str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise ValueError(f"{name}={value!r}: give a whole number from 1")
    return number


def _seconds(name: str, value: float | str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if not number >= 0:
        raise ValueError(f"{name}={value!r}: give seconds (0: no limit)")
    return number
