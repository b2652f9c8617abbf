"""Hermes' own skills index for benches/skills.rs: the section its prompt builder adds to the
system prompt for the skills under $HERMES_HOME/skills, for a model offered the tools named in
argv[1] (comma-separated; their toolsets looked up as Hermes' agent does). Written to stdout
as UTF-8, nothing else; the bench counts its bytes beside ours."""

import sys

from agent.prompt_builder import build_skills_system_prompt
from model_tools import get_toolset_for_tool


def main() -> None:
    tools = {t for t in sys.argv[1].split(",") if t}
    toolsets = {get_toolset_for_tool(t) for t in tools} - {None}
    index = build_skills_system_prompt(available_tools=tools, available_toolsets=toolsets)
    sys.stdout.buffer.write(index.encode("utf-8"))


if __name__ == "__main__":
    main()
