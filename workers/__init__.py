"""The agent runtime: the loop that runs one thread, model providers, coding tools.

Workers know threads (``store``) but nothing of jobs or leads; the orchestrator composes them.

Public names are loaded on first access, as ``orchestrator``'s: a module that needs one part
(``workers.tools``' names, ``context_window``) does not pay for the loop, the store's engine and
the providers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._limits import BudgetExhausted, Limits
    from ._loop import (
        INTERRUPTED_RESULT,
        CheckHook,
        HandOff,
        LoopConfig,
        LoopEvent,
        RunOutcome,
        run_thread,
        runner_id,
    )
    from ._prompts import (
        project_notes,
        worker_system_prompt,
    )
    from ._protocol import (
        ORCHESTRATOR_TOOL_ID_PREFIX,
        Model,
        ModelRequest,
        ModelResponse,
        StopReason,
        ToolSpec,
        preflight,
    )
    from ._redact import (
        MASK,
        RedactingWriter,
        configured_secrets,
        redact,
        redact_data,
        redacted,
        refresh_secrets,
    )
    from ._request import (
        DEFAULT_OUTPUT_CAP,
        build_request,
        cap_text,
    )
    from ._results import (
        SUBMIT_RESULT,
        Submission,
    )
    from ._secrets import env_var, secret_variables, take_secrets, taken_secrets
    from ._tokens import (
        BYTES_PER_TOKEN,
        context_window,
        estimate_tokens,
        prefix_tokens,
        request_tokens,
    )
    from .errors import (
        BadModelResponse,
        ContextTooLong,
        HandOffRefused,
        ModelError,
        ModelSpecError,
        ProviderRejected,
        ProviderUnavailable,
        ScriptError,
        SpendLimitReached,
        ToolInputError,
        WorkerError,
    )
    from .providers import (
        make_model,
        parse_model_spec,
    )
    from .tools import (
        DEFAULT_WORKER_TOOLS,
        TOOL_REGISTRY,
        Tool,
        ToolContext,
        ToolOutput,
        build_tools,
    )

_WHERE = {
    "BYTES_PER_TOKEN": "._tokens",
    "BadModelResponse": ".errors",
    "BudgetExhausted": "._limits",
    "CheckHook": "._loop",
    "ContextTooLong": ".errors",
    "DEFAULT_OUTPUT_CAP": "._request",
    "DEFAULT_WORKER_TOOLS": ".tools",
    "HandOff": "._loop",
    "HandOffRefused": ".errors",
    "INTERRUPTED_RESULT": "._loop",
    "Limits": "._limits",
    "LoopConfig": "._loop",
    "LoopEvent": "._loop",
    "MASK": "._redact",
    "Model": "._protocol",
    "ModelError": ".errors",
    "ModelRequest": "._protocol",
    "ModelResponse": "._protocol",
    "ModelSpecError": ".errors",
    "ORCHESTRATOR_TOOL_ID_PREFIX": "._protocol",
    "ProviderRejected": ".errors",
    "ProviderUnavailable": ".errors",
    "RedactingWriter": "._redact",
    "RunOutcome": "._loop",
    "SUBMIT_RESULT": "._results",
    "ScriptError": ".errors",
    "SpendLimitReached": ".errors",
    "StopReason": "._protocol",
    "Submission": "._results",
    "TOOL_REGISTRY": ".tools",
    "Tool": ".tools",
    "ToolContext": ".tools",
    "ToolInputError": ".errors",
    "ToolOutput": ".tools",
    "ToolSpec": "._protocol",
    "WorkerError": ".errors",
    "build_request": "._request",
    "build_tools": ".tools",
    "cap_text": "._request",
    "configured_secrets": "._redact",
    "context_window": "._tokens",
    "env_var": "._secrets",
    "estimate_tokens": "._tokens",
    "make_model": ".providers",
    "parse_model_spec": ".providers",
    "prefix_tokens": "._tokens",
    "preflight": "._protocol",
    "project_notes": "._prompts",
    "redact": "._redact",
    "redact_data": "._redact",
    "redacted": "._redact",
    "refresh_secrets": "._redact",
    "request_tokens": "._tokens",
    "run_thread": "._loop",
    "runner_id": "._loop",
    "secret_variables": "._secrets",
    "take_secrets": "._secrets",
    "taken_secrets": "._secrets",
    "worker_system_prompt": "._prompts",
}

__all__ = [
    "BYTES_PER_TOKEN",
    "DEFAULT_OUTPUT_CAP",
    "DEFAULT_WORKER_TOOLS",
    "INTERRUPTED_RESULT",
    "MASK",
    "ORCHESTRATOR_TOOL_ID_PREFIX",
    "SUBMIT_RESULT",
    "TOOL_REGISTRY",
    "BadModelResponse",
    "BudgetExhausted",
    "CheckHook",
    "ContextTooLong",
    "HandOff",
    "HandOffRefused",
    "Limits",
    "LoopConfig",
    "LoopEvent",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSpecError",
    "ProviderRejected",
    "ProviderUnavailable",
    "RedactingWriter",
    "RunOutcome",
    "ScriptError",
    "SpendLimitReached",
    "StopReason",
    "Submission",
    "Tool",
    "ToolContext",
    "ToolInputError",
    "ToolOutput",
    "ToolSpec",
    "WorkerError",
    "build_request",
    "build_tools",
    "cap_text",
    "configured_secrets",
    "context_window",
    "env_var",
    "estimate_tokens",
    "make_model",
    "parse_model_spec",
    "prefix_tokens",
    "preflight",
    "project_notes",
    "redact",
    "redact_data",
    "redacted",
    "refresh_secrets",
    "request_tokens",
    "run_thread",
    "runner_id",
    "secret_variables",
    "take_secrets",
    "taken_secrets",
    "worker_system_prompt",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
