"""The thread store: append-only transcripts, refs, forks by reference, search, usage, leases.

Public names are loaded on first access (PEP 562), so a command that only needs a leaf of the
store (the secret redaction, refs) does not pay for SQLAlchemy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._dispatches import Dispatch
    from ._engine import Database, database_url, finish_uncancelled
    from ._leases import Lease
    from ._ledger import UsageTotal
    from ._liveness import owner_is_dead
    from ._outputs import INLINE_LIMIT, MAX_OUTPUT_BYTES, OutputFile
    from ._redact import MASK, configured_secrets, redact, redact_data, refresh_secrets
    from ._store import Store
    from ._stored import construct_model
    from ._transcript import (
        content_json,
        dump_transcript,
        parse_transcript,
        transcript_line,
        transcript_parts,
    )
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
        SearchQueryError,
        StatusError,
        StoreError,
        ThreadNotFound,
    )
    from .models import (
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
        StoredOutput,
        TextBlock,
        ThinkingBlock,
        ThreadInfo,
        ToolResultBlock,
        ToolUseBlock,
        Usage,
        UsageRecord,
        Verification,
    )
    from .refs import ResolvedRef, ThreadRef, format_ref, new_id

_WHERE = {
    "AmbiguousRef": ".errors",
    "CONTENT_ADAPTER": ".models",
    "Change": ".models",
    "ConcurrencyError": ".errors",
    "ContentBlock": ".models",
    "Database": "._engine",
    "DatabaseError": ".errors",
    "DatabaseFull": ".errors",
    "DatabaseUnavailable": ".errors",
    "Dispatch": "._dispatches",
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
    "OutputFile": "._outputs",
    "RefError": ".errors",
    "RefSyntaxError": ".errors",
    "SearchQueryError": ".errors",
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
    "Verification": ".models",
    "configured_secrets": "._redact",
    "construct_model": "._stored",
    "content_json": "._transcript",
    "database_url": "._engine",
    "dump_transcript": "._transcript",
    "finish_uncancelled": "._engine",
    "format_ref": ".refs",
    "new_id": ".refs",
    "owner_is_dead": "._liveness",
    "parse_transcript": "._transcript",
    "redact": "._redact",
    "redact_data": "._redact",
    "refresh_secrets": "._redact",
    "transcript_line": "._transcript",
    "transcript_parts": "._transcript",
}

__all__ = [
    "CONTENT_ADAPTER",
    "INLINE_LIMIT",
    "MASK",
    "MAX_OUTPUT_BYTES",
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
    "Lease",
    "LeaseHeld",
    "LeaseLost",
    "Message",
    "NewMessage",
    "OutputFile",
    "RefError",
    "RefSyntaxError",
    "ResolvedRef",
    "Result",
    "Role",
    "SearchHit",
    "SearchQueryError",
    "Status",
    "StatusError",
    "Store",
    "StoreError",
    "StoredOutput",
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
    "construct_model",
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
    "transcript_parts",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
