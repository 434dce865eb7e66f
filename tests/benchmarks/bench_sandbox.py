"""Sandbox overhead per ``bash`` call. Prints one JSON document.

The same commands through the real ``BashTool``, once with ``sandbox = "none"`` (the plain
process-group runner) and once under bubblewrap (``required``), interleaved call by call in the
same run so both see the same machine load: the median wall time per call and the ratio
sandbox / plain, for a trivial command (``true``: pure start-up cost) and a small real one.

Run: python tests/benchmarks/bench_sandbox.py [CALLS]
"""

from __future__ import annotations

import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from workers.tools import BashTool, ToolContext, sandbox_status

COMMANDS = {
    "true": "true",
    "small": "ls -la >/dev/null; echo hello > out.txt; cat out.txt; python3 -c 'print(1)'",
}


async def main(calls: int) -> dict[str, object]:
    status = sandbox_status()
    if not status.available:
        return {"error": f"sandbox unavailable: {status.reason}"}
    tool = BashTool()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp)
        modes = {
            "plain": ToolContext(workspace=ws, sandbox="none"),
            "sandbox": ToolContext(workspace=ws, sandbox="required"),
        }
        for name, command in COMMANDS.items():
            times: dict[str, list[float]] = {m: [] for m in modes}
            for ctx in modes.values():  # warm-up
                await tool.invoke({"command": command}, ctx)
            for _ in range(calls):
                for m, ctx in modes.items():
                    t0 = time.perf_counter()
                    res = await tool.invoke({"command": command}, ctx)
                    times[m].append(time.perf_counter() - t0)
                    assert not res.is_error, res.text
            plain = statistics.median(times["plain"])
            boxed = statistics.median(times["sandbox"])
            out[name] = {
                "calls": calls,
                "plain_median_ms": round(plain * 1000, 2),
                "sandbox_median_ms": round(boxed * 1000, 2),
                "sandbox_p90_ms": round(statistics.quantiles(times["sandbox"], n=10)[-1] * 1000, 2),
                "ratio": round(boxed / plain, 2),
                "added_ms": round((boxed - plain) * 1000, 2),
            }
    return {
        "benchmark": "sandbox overhead per bash call",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "bwrap": status.program,
        "results": out,
    }


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100
    print(json.dumps(asyncio.run(main(n)), indent=2))
