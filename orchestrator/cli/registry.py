"""The ``threadloom`` commands: name → ``module:attribute`` of its click command.

Adding a command is one module (``orchestrator/cli/_cmd_<name>.py``, see ``cli._app``) and one
line here. Nothing is imported until the command is named (``ThreadloomGroup.get_command``).
"""

from __future__ import annotations

COMMANDS: dict[str, str] = {
    "ask": "orchestrator.cli._cmd_run:ask",
    "demo": "orchestrator.cli._cmd_run:demo",
    "diff": "orchestrator.cli._cmd_worktrees:diff",
    "export": "orchestrator.cli._cmd_transcript:export",
    "fork": "orchestrator.cli._cmd_transcript:fork",
    "gc": "orchestrator.cli._cmd_worktrees:gc",
    "import": "orchestrator.cli._cmd_import:import_",
    "ls": "orchestrator.cli._cmd_read:ls",
    "mcp": "orchestrator.cli._cmd_mcp:mcp",
    "merge": "orchestrator.cli._cmd_worktrees:merge",
    "migrate": "orchestrator.cli._cmd_stats:migrate",
    "resume": "orchestrator.cli._cmd_run:resume",
    "run": "orchestrator.cli._cmd_run:run",
    "search": "orchestrator.cli._cmd_read:search",
    "serve": "orchestrator.cli._cmd_serve:serve",
    "show": "orchestrator.cli._cmd_read:show",
    "stats": "orchestrator.cli._cmd_stats:stats",
    "tree": "orchestrator.cli._cmd_read:tree",
    "worker": "orchestrator.cli._cmd_worker:worker",
}
"""Command name → ``module:attribute`` of its click command, imported on first use."""
