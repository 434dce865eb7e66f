"""The thread store: append-only transcripts, refs, forks by reference, search, usage, leases.

Public names are loaded on first access (PEP 562), so a command that only needs a leaf of the
store (the secret redaction, refs) does not pay for SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
    from ._redact import (
        MASK as MASK,
        RedactingWriter as RedactingWriter,
        configured_secrets as configured_secrets,
        redact as redact,
        redact_data as redact_data,
        redacted as redacted,
        refresh_secrets as refresh_secrets,
    )
    from ._schema import SCHEMA_HEAD as SCHEMA_HEAD
    from ._secrets import (
        env_var as env_var,
        secret_variables as secret_variables,
        take_secrets as take_secrets,
        taken_secrets as taken_secrets,
    )
    from ._store import Store as Store
    from ._tables import FTS_TABLE as FTS_TABLE, metadata as metadata
    from .errors import (
        AmbiguousRef as AmbiguousRef,
        ConcurrencyError as ConcurrencyError,
        DatabaseError as DatabaseError,
        DatabaseFull as DatabaseFull,
        DatabaseUnavailable as DatabaseUnavailable,
        ForkPointError as ForkPointError,
        ImportFormatError as ImportFormatError,
        InvariantError as InvariantError,
        LeaseHeld as LeaseHeld,
        LeaseLost as LeaseLost,
        RefError as RefError,
        RefSyntaxError as RefSyntaxError,
        SearchQueryError as SearchQueryError,
        SourceTaken as SourceTaken,
        StatusError as StatusError,
        StoreError as StoreError,
        ThreadNotFound as ThreadNotFound,
    )
    from .models import (
        TERMINAL_STATUSES as TERMINAL_STATUSES,
        Change as Change,
        Check as Check,
        ClaimCheck as ClaimCheck,
        ContentBlock as ContentBlock,
        Effects as Effects,
        Finding as Finding,
        ForkOrigin as ForkOrigin,
        Kind as Kind,
        Message as Message,
        NewMessage as NewMessage,
        Result as Result,
        Role as Role,
        SearchHit as SearchHit,
        Status as Status,
        StoredOutput as StoredOutput,
        TextBlock as TextBlock,
        ThinkingBlock as ThinkingBlock,
        ThreadInfo as ThreadInfo,
        ToolResultBlock as ToolResultBlock,
        ToolUseBlock as ToolUseBlock,
        Usage as Usage,
        UsageRecord as UsageRecord,
        ValidationError as ValidationError,
        Verdict as Verdict,
        Verification as Verification,
        validate_blocks as validate_blocks,
    )
    from .refs import (
        REF_IN_TEXT as REF_IN_TEXT,
        ResolvedRef as ResolvedRef,
        ThreadRef as ThreadRef,
        format_ref as format_ref,
        new_id as new_id,
        shortest_refs as shortest_refs,
    )

_WHERE = {
    "AmbiguousRef": ".errors",
    "Change": ".models",
    "Check": ".models",
    "ClaimCheck": ".models",
    "ConcurrencyError": ".errors",
    "ContentBlock": ".models",
    "Database": "._engine",
    "DatabaseError": ".errors",
    "DatabaseFull": ".errors",
    "DatabaseUnavailable": ".errors",
    "Dispatch": "._dispatches",
    "Effects": ".models",
    "FTS_TABLE": "._tables",
    "Finding": ".models",
    "ForkOrigin": ".models",
    "ForkPointError": ".errors",
    "INLINE_LIMIT": "._outputs",
    "ImportFormatError": ".errors",
    "InvariantError": ".errors",
    "Kind": ".models",
    "Lease": "._leases",
    "LeaseHeld": ".errors",
    "LeaseLost": ".errors",
    "MASK": "._redact",
    "MAX_OUTPUT_BYTES": "._outputs",
    "Message": ".models",
    "NewMessage": ".models",
    "NewWorker": "._dispatches",
    "OutputFile": "._outputs",
    "RedactingWriter": "._redact",
    "RefError": ".errors",
    "RefSyntaxError": ".errors",
    "SCHEMA_HEAD": "._schema",
    "SearchQueryError": ".errors",
    "SourceTaken": ".errors",
    "SpawnRequest": "._dispatches",
    "ResolvedRef": ".refs",
    "Result": ".models",
    "Role": ".models",
    "SearchHit": ".models",
    "Status": ".models",
    "StatusError": ".errors",
    "Store": "._store",
    "StoreError": ".errors",
    "StoredOutput": ".models",
    "TERMINAL_STATUSES": ".models",
    "TextBlock": ".models",
    "ThinkingBlock": ".models",
    "ThreadInfo": ".models",
    "ThreadNotFound": ".errors",
    "ThreadRef": ".refs",
    "ToolResultBlock": ".models",
    "ToolUseBlock": ".models",
    "Usage": ".models",
    "UsageRecord": ".models",
    "UsageTotal": "._ledger",
    "Verdict": ".models",
    "Verification": ".models",
    "check_append": "._invariants",
    "configured_secrets": "._redact",
    "ValidationError": ".models",
    "validate_blocks": ".models",
    "database_url": "._engine",
    "env_var": "._secrets",
    "finish_uncancelled": "._engine",
    "metadata": "._tables",
    "format_ref": ".refs",
    "new_id": ".refs",
    "owner_is_dead": "._liveness",
    "redact": "._redact",
    "redact_data": "._redact",
    "redacted": "._redact",
    "refresh_secrets": "._redact",
    "secret_variables": "._secrets",
    "shortest_refs": ".refs",
    "REF_IN_TEXT": ".refs",
    "take_secrets": "._secrets",
    "taken_secrets": "._secrets",
}

__all__ = sorted(_WHERE, key=lambda n: (0 if n.isupper() else 1 if n[0].isupper() else 2, n))
"""The public surface: every name of ``_WHERE``, constants, then classes, then functions."""


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
