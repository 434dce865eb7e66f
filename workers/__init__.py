"""The agent runtime: the loop that runs one thread, model providers, coding tools.

Workers know threads (``store``) but nothing of jobs or leads; the orchestrator composes them.
"""

from ._loop import (
    INTERRUPTED_RESULT,
    BudgetExhausted,
    CheckHook,
    HandOff,
    LoopConfig,
    LoopEvent,
    RunOutcome,
    run_thread,
    runner_id,
)
from ._prompts import project_notes, worker_system_prompt
from ._protocol import (
    ORCHESTRATOR_TOOL_ID_PREFIX,
    Model,
    ModelRequest,
    ModelResponse,
    StopReason,
    ToolSpec,
    preflight,
)
from ._request import DEFAULT_OUTPUT_CAP, build_request, cap_text
from ._results import SUBMIT_RESULT, Submission
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
from .providers import make_model, parse_model_spec
from .tools import DEFAULT_WORKER_TOOLS, TOOL_REGISTRY, Tool, ToolContext, ToolOutput, build_tools

__all__ = [
    "BYTES_PER_TOKEN",
    "DEFAULT_OUTPUT_CAP",
    "DEFAULT_WORKER_TOOLS",
    "INTERRUPTED_RESULT",
    "ORCHESTRATOR_TOOL_ID_PREFIX",
    "SUBMIT_RESULT",
    "TOOL_REGISTRY",
    "BadModelResponse",
    "BudgetExhausted",
    "CheckHook",
    "ContextTooLong",
    "HandOff",
    "HandOffRefused",
    "LoopConfig",
    "LoopEvent",
    "Model",
    "ModelError",
    "ModelRequest",
    "ModelResponse",
    "ModelSpecError",
    "ProviderRejected",
    "ProviderUnavailable",
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
    "context_window",
    "estimate_tokens",
    "make_model",
    "parse_model_spec",
    "prefix_tokens",
    "preflight",
    "project_notes",
    "request_tokens",
    "run_thread",
    "runner_id",
    "worker_system_prompt",
]
