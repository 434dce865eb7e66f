"""Failures of the worker's coding tools.

    WorkerError                     (workers.errors)
    └── ToolFailure                 a domain problem, reported to the model as an error result
        ├── PathRefused             a path that is, or resolves, outside the workspace
        └── GlobError               a glob pattern that does not parse

A ``ToolFailure`` never escapes ``Tool.invoke``: it becomes ``ToolOutput(is_error=True)`` whose
text is the exception's message, so every message is written for the model to read and act on.
"""

from __future__ import annotations

from workers.errors import WorkerError


class ToolFailure(WorkerError):
    """A tool could not do what was asked; ``str(exc)`` is the model-facing explanation."""


class PathRefused(ToolFailure):
    """A path was refused because it is, or resolves, outside the workspace (or cannot be
    resolved safely). ``reason`` names why, e.g. ``"symlink points outside the workspace: …"``.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"refused: {reason}")
        self.reason = reason


class GlobError(ToolFailure):
    """A glob pattern (``grep``'s ``glob``, ``list_files``' ``pattern``) does not parse."""
