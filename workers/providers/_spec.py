"""Model spec strings (SPEC §Model specs) and the factory that turns one into a provider.

    anthropic:MODEL              the Anthropic Messages API (``ANTHROPIC_API_KEY``)
    openai:MODEL@BASE_URL        any OpenAI-compatible chat-completions endpoint
    scripted:PATH                the offline, deterministic scripted model

Parsing never touches the network or the file system. The Anthropic SDK is imported only when an
``anthropic:`` model is actually built, so commands that never call Claude (``ls``, ``show``, the
scripted demo) do not pay for its import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from workers._protocol import Model
from workers.errors import ModelSpecError

Provider = Literal["anthropic", "openai", "scripted"]

EXPECTED_FORMS = "anthropic:MODEL, openai:MODEL@BASE_URL or scripted:PATH"

_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$")
# The model part of an openai spec ends at the first "@" that starts an http(s) URL, so model
# names that contain "@" themselves (rare, but some gateways use them) still parse.
_OPENAI = re.compile(r"^(?P<model>.+?)@(?P<url>https?://\S+)$")
_URL = re.compile(r"^https?://[^/\s?#]+(/\S*)?$")


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A parsed model spec. ``str(spec)`` gives back the canonical spec string."""

    provider: Provider
    model: str
    base_url: str | None = None
    path: str | None = None

    def __str__(self) -> str:
        if self.provider == "openai":
            return f"openai:{self.model}@{self.base_url}"
        if self.provider == "scripted":
            return f"scripted:{self.path}"
        return f"{self.provider}:{self.model}"


def _bad(spec: str, why: str) -> ModelSpecError:
    return ModelSpecError(f"bad model spec {spec!r}: {why}; expected {EXPECTED_FORMS}")


def parse_model_spec(spec: str) -> ModelSpec:
    """Parse a spec string; any malformed spec is a one-line ``ModelSpecError``."""
    if not isinstance(spec, str) or not spec.strip():
        raise _bad(str(spec), "empty")
    text = spec.strip()
    provider, sep, rest = text.partition(":")
    if not sep:
        raise _bad(spec, "no provider prefix")
    if provider == "anthropic":
        if not rest or not _MODEL_NAME.match(rest):
            raise _bad(spec, "missing or malformed model name")
        return ModelSpec(provider="anthropic", model=rest)
    if provider == "openai":
        m = _OPENAI.match(rest)
        if m is None:
            raise _bad(spec, "an openai spec needs MODEL@BASE_URL with an http(s) URL")
        model, url = m.group("model"), m.group("url")
        if not _MODEL_NAME.match(model):
            raise _bad(spec, "malformed model name")
        if not _URL.match(url):
            raise _bad(spec, "malformed base URL")
        return ModelSpec(provider="openai", model=model, base_url=url)
    if provider == "scripted":
        if not rest.strip():
            raise _bad(spec, "missing script path")
        return ModelSpec(provider="scripted", model="scripted", path=rest)
    raise _bad(spec, f"unknown provider {provider!r}")


def make_model(spec: str, **options: Any) -> Model:
    """Build the provider for ``spec``.

    ``options`` go to the HTTP provider's constructor; ``AnthropicModel`` and
    ``OpenAIChatModel`` share ``api_key``, ``max_retries``, ``timeout``, ``max_tokens``,
    ``backoff_base``, ``backoff_cap`` and ``retry_after_cap``. A job's ``max_output_tokens`` and
    ``request_timeout_s`` arrive here as ``max_tokens`` and ``timeout``; left out, each provider's
    own default holds (the request's 8,192 output tokens; 600 s per attempt). A job's
    ``tool_calls`` goes to the OpenAI-compatible provider only. The offline scripted
    model has no transport to configure and ignores them, so a caller can pass the same settings
    whatever the spec names."""
    parsed = parse_model_spec(spec)
    if parsed.provider != "openai":
        options.pop("tool_calls", None)  # constrained tool calls: an OpenAI-compatible knob
    if parsed.provider == "anthropic":
        from .anthropic import AnthropicModel  # lazy: the SDK import costs about a second

        return AnthropicModel(parsed.model, **options)
    if parsed.provider == "openai":
        from .openai import OpenAIChatModel

        assert parsed.base_url is not None
        return OpenAIChatModel(parsed.model, parsed.base_url, **options)
    from .scripted import ScriptedModel

    assert parsed.path is not None
    return ScriptedModel(parsed.path)
