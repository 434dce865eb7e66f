"""Token estimates and the prefix-cache simulation of ``FakeMessagesAPI`` (see its docstring)."""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from typing import Any


def canonical(block: Any) -> str:
    """The canonical JSON of a block for token counting and prefix hashing."""
    if isinstance(block, dict):
        block = {k: v for k, v in block.items() if k != "cache_control"}
    return json.dumps(block, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def tokens_of(text: str) -> int:
    return max(1, math.ceil(len(text) / 4))


def _system_blocks(system: Any) -> list[Any]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    return list(system)


def content_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return list(content)


def _segments(request: dict[str, Any]) -> list[tuple[str, Any]]:
    """(hash piece, block) for every cacheable block, in cache order."""
    out: list[tuple[str, Any]] = []
    for tool in request.get("tools") or []:
        out.append(("t:", tool))
    for block in _system_blocks(request.get("system")):
        out.append(("s:", block))
    for i, message in enumerate(request.get("messages") or []):
        for block in content_blocks(message.get("content", [])):
            out.append((f"m{i}:{message.get('role')}:", block))
    return out


def _has_cache_control(block: Any) -> bool:
    return isinstance(block, dict) and block.get("cache_control") is not None


class PromptCache:
    """The prefix-cache simulation described in the module docstring. Thread-safe."""

    def __init__(self, *, ttl_s: float = 300.0, min_tokens: int = 0) -> None:
        self.ttl_s = ttl_s
        self.min_tokens = min_tokens
        self._entries: dict[str, float] = {}
        self._lock = threading.Lock()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)

    def account(self, request: dict[str, Any]) -> dict[str, int]:
        """Input-side usage of ``request``; writes its breakpoints' prefixes."""
        digest = hashlib.sha256(f"model:{request.get('model')}".encode())
        cumulative = 0
        breakpoints: list[tuple[str, int]] = []
        for piece, block in _segments(request):
            text = canonical(block)
            cumulative += tokens_of(text)
            digest.update(piece.encode())
            digest.update(text.encode())
            digest.update(b"\x1e")
            if _has_cache_control(block):
                breakpoints.append((digest.copy().hexdigest(), cumulative))
        total = cumulative
        if not breakpoints:
            return {
                "input_tokens": total,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 0,
            }
        now = time.monotonic()
        with self._lock:
            hit = 0
            for key, tokens in breakpoints:
                expires = self._entries.get(key)
                if expires is not None and expires > now:
                    hit = max(hit, tokens)
            last = breakpoints[-1][1]
            cached_end = last if last >= self.min_tokens else 0
            for key, tokens in breakpoints:
                if tokens >= self.min_tokens:
                    self._entries[key] = now + self.ttl_s
        creation = max(cached_end - hit, 0)
        return {
            "input_tokens": total - hit - creation,
            "cache_read_input_tokens": hit,
            "cache_creation_input_tokens": creation,
        }


def estimate_tokens(request: dict[str, Any]) -> int:
    return sum(tokens_of(canonical(block)) for _, block in _segments(request))
