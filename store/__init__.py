"""The thread store: append-only transcripts, refs, forks by reference, search, usage, leases.

Public names are loaded on first access (PEP 562), so a command that only needs a leaf of the
store (the secret redaction, refs) does not pay for SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._db import Database, database_url, finish_uncancelled
    from ._ids import ThreadRef, format_ref, new_id
    from ._liveness import owner_is_dead
    from ._models import (
        CONTENT_ADAPTER,
        TERMINAL_STATUSES,
        Change,
        ContentBlock,
        Finding,
        ForkOrigin,
        Kind,
        Message,
        NewMessage,
        Result,
        Role,
        SearchHit,
        Status,
        TextBlock,
        ThinkingBlock,
        ThreadInfo,
        ToolResultBlock,
        ToolUseBlock,
        Usage,
        UsageRecord,
        Verification,
    )
    from ._redact import MASK, configured_secrets, redact, redact_data, refresh_secrets
    from ._store import Dispatch, ResolvedRef, Store, UsageTotal
    from ._transcript import content_json, dump_transcript, parse_transcript, transcript_line
    from .errors import (
        AmbiguousRef,
        ConcurrencyError,
        DatabaseError,
        DatabaseFull,
        DatabaseUnavailable,
        ForkPointError,
        ImportFormatError,
        InvariantError,
        LeaseHeld,
        LeaseLost,
        RefError,
        RefSyntaxError,
        StatusError,
        StoreError,
        ThreadNotFound,
    )

_WHERE = {
    "AmbiguousRef": ".errors",
    "CONTENT_ADAPTER": "._models",
    "Change": "._models",
    "ConcurrencyError": ".errors",
    "ContentBlock": "._models",
    "Database": "._db",
    "DatabaseError": ".errors",
    "DatabaseFull": ".errors",
    "DatabaseUnavailable": ".errors",
    "Dispatch": "._store",
    "Finding": "._models",
    "ForkOrigin": "._models",
    "ForkPointError": ".errors",
    "ImportFormatError": ".errors",
    "InvariantError": ".errors",
    "Kind": "._models",
    "LeaseHeld": ".errors",
    "LeaseLost": ".errors",
    "MASK": "._redact",
    "Message": "._models",
    "NewMessage": "._models",
    "RefError": ".errors",
    "RefSyntaxError": ".errors",
    "ResolvedRef": "._store",
    "Result": "._models",
    "Role": "._models",
    "SearchHit": "._models",
    "Status": "._models",
    "StatusError": ".errors",
    "Store": "._store",
    "StoreError": ".errors",
    "TERMINAL_STATUSES": "._models",
    "TextBlock": "._models",
    "ThinkingBlock": "._models",
    "ThreadInfo": "._models",
    "ThreadNotFound": ".errors",
    "ThreadRef": "._ids",
    "ToolResultBlock": "._models",
    "ToolUseBlock": "._models",
    "Usage": "._models",
    "UsageRecord": "._models",
    "UsageTotal": "._store",
    "Verification": "._models",
    "configured_secrets": "._redact",
    "content_json": "._transcript",
    "database_url": "._db",
    "dump_transcript": "._transcript",
    "finish_uncancelled": "._db",
    "format_ref": "._ids",
    "new_id": "._ids",
    "owner_is_dead": "._liveness",
    "parse_transcript": "._transcript",
    "redact": "._redact",
    "redact_data": "._redact",
    "refresh_secrets": "._redact",
    "transcript_line": "._transcript",
}

__all__ = [
    "CONTENT_ADAPTER",
    "MASK",
    "TERMINAL_STATUSES",
    "AmbiguousRef",
    "Change",
    "ConcurrencyError",
    "ContentBlock",
    "Database",
    "DatabaseError",
    "DatabaseFull",
    "DatabaseUnavailable",
    "Dispatch",
    "Finding",
    "ForkOrigin",
    "ForkPointError",
    "ImportFormatError",
    "InvariantError",
    "Kind",
    "LeaseHeld",
    "LeaseLost",
    "Message",
    "NewMessage",
    "RefError",
    "RefSyntaxError",
    "ResolvedRef",
    "Result",
    "Role",
    "SearchHit",
    "Status",
    "StatusError",
    "Store",
    "StoreError",
    "TextBlock",
    "ThinkingBlock",
    "ThreadInfo",
    "ThreadNotFound",
    "ThreadRef",
    "ToolResultBlock",
    "ToolUseBlock",
    "Usage",
    "UsageRecord",
    "UsageTotal",
    "Verification",
    "configured_secrets",
    "content_json",
    "database_url",
    "dump_transcript",
    "finish_uncancelled",
    "format_ref",
    "new_id",
    "owner_is_dead",
    "parse_transcript",
    "redact",
    "redact_data",
    "refresh_secrets",
    "transcript_line",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
