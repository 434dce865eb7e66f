"""The thread store: append-only transcripts, refs, forks by reference, search, usage, leases.

The vocabulary (``errors``, ``models``, ``refs``: light, pure Python) comes with the package;
the other public names are loaded on first access (PEP 562), so a command that only needs a leaf
of the store (refs, the models) does not pay for SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import errors, models, refs
from .errors import *  # noqa: F403  (the vocabulary: each module's own __all__)
from .models import *  # noqa: F403
from .refs import *  # noqa: F403

if TYPE_CHECKING:
    from ._dispatches import (
        Dispatch as Dispatch,
        NewWorker as NewWorker,
        SpawnRequest as SpawnRequest,
    )
    from ._engine import (
        Database as Database,
        database_url as database_url,
        finish_uncancelled as finish_uncancelled,
    )
    from ._invariants import check_append as check_append
    from ._leases import Lease as Lease
    from ._ledger import UsageTotal as UsageTotal
    from ._liveness import owner_is_dead as owner_is_dead
    from ._outputs import (
        INLINE_LIMIT as INLINE_LIMIT,
        MAX_OUTPUT_BYTES as MAX_OUTPUT_BYTES,
        OutputFile as OutputFile,
    )
    from ._schema import SCHEMA_HEAD as SCHEMA_HEAD
    from ._store import Store as Store
    from ._tables import FTS_TABLE as FTS_TABLE, metadata as metadata

_LAZY = {
    "Database": "._engine",
    "Dispatch": "._dispatches",
    "FTS_TABLE": "._tables",
    "INLINE_LIMIT": "._outputs",
    "Lease": "._leases",
    "MAX_OUTPUT_BYTES": "._outputs",
    "NewWorker": "._dispatches",
    "OutputFile": "._outputs",
    "SCHEMA_HEAD": "._schema",
    "SpawnRequest": "._dispatches",
    "Store": "._store",
    "UsageTotal": "._ledger",
    "check_append": "._invariants",
    "database_url": "._engine",
    "finish_uncancelled": "._engine",
    "metadata": "._tables",
    "owner_is_dead": "._liveness",
}

_WHERE = {n: "." + m.__name__.rpartition(".")[2] for m in (errors, models, refs) for n in m.__all__}
_WHERE |= _LAZY
"""Where each public name lives: the vocabulary's modules, imported with the package, and the
private modules whose names load on first access."""

__all__ = sorted(_WHERE, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
"""The public surface: every name of ``_WHERE``, constants, then classes, then functions."""


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
