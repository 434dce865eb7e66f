"""Where the real Claude Code and Codex session files are (``../shared/realsessions`` beside
the repository, see its SOURCES.md; never copied into it): ``THREADLOOM_REALSESSIONS`` if set,
else beside this checkout, else the shared folder of the machine the project is built on (a CI
clone may sit elsewhere). Tests on them fail, never skip, when they are missing."""

from __future__ import annotations

import os
from pathlib import Path

_CANDIDATES = [
    Path(os.environ["THREADLOOM_REALSESSIONS"])
    if os.environ.get("THREADLOOM_REALSESSIONS")
    else None,
    Path(__file__).resolve().parents[1].parent / "shared" / "realsessions",
    Path("/work/shared/realsessions"),
]

REAL = next((p for p in _CANDIDATES if p is not None and p.is_dir()), _CANDIDATES[1])
CLAUDE = REAL / "claude" / "projects"
CODEX = REAL / "codex" / "sessions"


def require(path: Path = REAL) -> Path:
    """``path``, which must exist: a missing corpus is a failure, not a skip."""
    assert path.exists(), f"the real session files are missing: {path} (../shared/realsessions)"
    return path
