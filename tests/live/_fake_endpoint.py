"""A stand-in "real" endpoint for checking that tests/live runs, without a model or a network.

    .venv/bin/python -m tests.live._fake_endpoint [PORT]     # prints its base URL, serves on
    THREADLOOM_LIVE_MODEL=openai:fake@http://127.0.0.1:PORT/v1 .venv/bin/python -m pytest tests/live

It is ``tests.fakes.chat_api.FakeChatAPI`` (which refuses a request that breaks tool pairing, as
real servers do) answering like a dutiful small model: a worker runs its failing test module with
``bash``, then calls ``submit_result`` citing the stored output and copying its counts; told
something in plain words (a resume) it answers in plain text — and, nudged, submits; a reader
reads the overview and answers citing message 1; the lead writes a one-line report. It proves
the suite's plumbing, not any model's skill. Stops on SIGTERM/SIGINT or when its stdin closes.
"""

from __future__ import annotations

import json
import re
import signal
import sys
import threading
from typing import Any

from tests.fakes.chat_api import FakeChatAPI

_LABEL = re.compile(r"\[(T-[0-9a-z]+#\d+)\]")
_TARGET = re.compile(r"Thread to read: (T-[0-9a-z]+)")
_COUNTS = re.compile(r"^(?:Ran \d+ tests? in \S+|FAILED \([^)]*\)|OK\b.*)$", re.MULTILINE)
_MODULE = re.compile(r"python -m unittest (tests\.test_\w+)")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else ""


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"content": None, "tool_calls": [{"name": name, "arguments": arguments}]}


def reply(request: dict[str, Any]) -> dict[str, Any]:
    tools = {t["function"]["name"] for t in request.get("tools") or []}
    messages = request["messages"]
    last = messages[-1]
    everything = "\n".join(_text(m) for m in messages)
    if "dispatch" in tools:
        return {"content": "Report: each worker's result and ref are above."}
    if "submit_result" not in tools:  # a reader
        target = _TARGET.search(everything)
        if last["role"] == "user" and target:
            return _call("read_thread", {"ref": target.group(1), "mode": "overview"})
        ref = target.group(1) if target else "T-0000"
        return {"content": f"The worker was given its task at {ref}#1."}
    module = _MODULE.search(everything)
    command = f"python -m unittest {module.group(1) if module else ''}".strip()
    if last["role"] == "tool":
        evidence = _LABEL.findall(_text(last))
        counts = " ".join(_COUNTS.findall(_text(last)))  # "Ran 39 tests in 0.004s FAILED (…)"
        return _call(
            "submit_result",
            {
                "status": "partial",
                "summary": f"Ran `{command}`: {counts}; the fake model changes nothing.",
                "findings": [{"claim": "the test module was run", "evidence": evidence[:1]}],
                "verification": [{"command": command, "outcome": "see the evidence"}],
            },
        )
    said = _text(last)
    if said.startswith("[threadloom]"):  # a nudge: submit, citing the newest stored output
        evidence = _LABEL.findall(everything)[-1:]
        findings = [{"claim": "the tests were run", "evidence": evidence}] if evidence else []
        return _call(
            "submit_result",
            {"status": "partial", "summary": "Nudged; submitting.", "findings": findings},
        )
    if said.startswith("Task ") or said.startswith("Run "):
        return _call("bash", {"command": command})
    return {"content": "The root cause is not fixed by this fake model; the tests still fail."}


def main() -> None:
    port = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with FakeChatAPI(port=port) as api:
        api.respond_with(reply)
        print(json.dumps({"base_url": api.base_url}), flush=True)
        threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
        stop.wait()
        rejected = [r.message for r in api.rejections]
        print(json.dumps({"requests": len(api.chat_requests), "rejections": rejected}), flush=True)


if __name__ == "__main__":
    main()
