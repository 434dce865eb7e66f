"""Which models a caller who is not the server's user may have built: the MCP server's clients.

A model spec chooses where a request goes and what answers it, and the server's keys go with
it: ``openai:m@http://HOST/v1`` sends the server's ``OPENAI_API_KEY`` to HOST, and
``scripted:PATH`` replays turns a file chooses (tool calls included) from any path the server
can read. So a client may name:

- ``anthropic:MODEL`` — the key goes to the Anthropic endpoint the server's environment
  configures (``ANTHROPIC_BASE_URL``, else Anthropic's), whatever the model;
- ``openai:MODEL@URL`` — only at an endpoint the server was configured with: the endpoint of its
  own ``--model``/``--worker-model``, or one the user allowed (``--allow-endpoint URL``);
  compared as scheme, host, port and path, and a URL with user info, a query or a fragment is
  compared as it is written, never parsed generously;
- ``scripted:PATH`` — only the server's own ``--model``/``--worker-model``, unless the user
  allows clients theirs (``--allow-scripted``).

The server's own specs are always allowed. ``ModelPolicy.guard`` wraps the orchestrator's model
factory, so every model built for a client's work is checked where it is built — a worker
dispatched by a client's ``run_job`` lead, a resumed thread's stored model — and refused
(``ModelRefused``, exit 2) before a request is sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .errors import ModelRefused, UsageError
from .jobs import resolve_spec

if TYPE_CHECKING:
    from workers import Model

    from .runtime import ModelFactory


def endpoint(url: str) -> str:
    """``url`` as endpoints are compared: ``scheme://host:port/path`` (lower-case scheme and
    host, the default port written out, no trailing slash); a URL with user info, a query or a
    fragment is kept as written (only an identical allow-list entry matches it)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return url
    if parts.username is not None or parts.query or parts.fragment or not parts.hostname:
        return url
    scheme = parts.scheme.lower()
    port = port or (443 if scheme == "https" else 80)
    host = parts.hostname.lower()
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


def check_endpoint(url: str) -> str:
    """An ``--allow-endpoint`` value, as it is compared; one line (exit 2) unless it is an
    http(s) URL."""
    from workers import ModelSpecError, parse_model_spec

    try:
        parse_model_spec(f"openai:m@{url}")
    except ModelSpecError:
        raise UsageError(
            f"--allow-endpoint {url!r}: an http(s) URL, e.g. http://127.0.0.1:11434/v1"
        ) from None
    return endpoint(url)


@dataclass(frozen=True)
class ModelPolicy:
    """The models a client may have built. ``own``: the server's specs (canonical);
    ``endpoints``: the OpenAI-compatible endpoints a key may go to (``endpoint`` form);
    ``scripted``: whether any scripted model is allowed; ``base_dir``: where a relative
    ``scripted:`` path is."""

    own: frozenset[str]
    endpoints: frozenset[str]
    scripted: bool
    base_dir: Path

    @classmethod
    def of(
        cls,
        specs: Iterable[str | None],
        *,
        endpoints: Iterable[str] = (),
        scripted: bool = False,
        base_dir: Path,
    ) -> ModelPolicy:
        """The policy of a server whose own models are ``specs`` (``--model``,
        ``--worker-model``; None: not given), with ``endpoints`` allowed besides theirs."""
        from workers import parse_model_spec

        own = {canonical(s, base_dir) for s in specs if s}
        allowed = {check_endpoint(u) for u in endpoints}
        for spec in own:
            parsed = parse_model_spec(spec)
            if parsed.base_url is not None:
                allowed.add(endpoint(parsed.base_url))
        return cls(
            own=frozenset(own), endpoints=frozenset(allowed), scripted=scripted, base_dir=base_dir
        )

    def check(self, spec: str) -> str:
        """``spec`` as it is stored (canonical), if a client may have it built; else
        ``ModelRefused`` naming why (a spec that does not parse: ``ModelSpecError``)."""
        from workers import parse_model_spec

        canon = canonical(spec, self.base_dir)
        if canon in self.own:
            return canon
        parsed = parse_model_spec(canon)
        shown = spec.strip()[:200]
        if parsed.provider == "scripted" and not self.scripted:
            raise ModelRefused(
                f"model {shown!r}: a scripted model replays the turns its file chooses, tool"
                " calls included; a client may name only the server's own"
                " (--model/--worker-model), unless the server allows others (--allow-scripted)"
            )
        if parsed.base_url is not None and endpoint(parsed.base_url) not in self.endpoints:
            known = ", ".join(sorted(self.endpoints)) or "none"
            raise ModelRefused(
                f"model {shown!r}: {parsed.base_url} is not an endpoint this server was"
                f" configured for, and the server's OPENAI_API_KEY would go there (allowed:"
                f" {known}; --allow-endpoint URL adds one)"
            )
        return canon

    def guard(self, factory: ModelFactory) -> ModelFactory:
        """``factory``, building only what ``check`` allows."""

        def build(spec: str, **options: Any) -> Model:
            return factory(self.check(spec), **options)

        return build


def canonical(spec: str, base_dir: Path) -> str:
    """A spec as it is stored: parsed (``ModelSpecError`` if it does not), a scripted path
    made absolute against ``base_dir``."""
    from workers import parse_model_spec

    return str(parse_model_spec(resolve_spec(spec.strip(), base_dir)))
