"""How fast a job pointed at a dead endpoint fails (issue 26 item 3: under 2 s), as a user runs
it: ``threadloom run`` in a new process, wall clock from spawn to exit.

    .venv/bin/python tests/benchmarks/bench_dead_endpoint.py [--rounds N]

Timed, interleaved round robin so other load weighs on each alike, and reported as medians:

- ``dead``: a job whose ``openai:`` endpoint is a loopback port nobody listens on (exit 4, one
  line: the endpoint is asked once before anything is stored, ``workers.providers._preflight``);
- ``dead_anthropic``: the same for an ``anthropic:`` job whose ``ANTHROPIC_BASE_URL`` is that
  port (the SDK's client is imported and built, then the same connection check);
- ``baseline``: the same command on a scripted job whose lead answers at once (exit 0): the floor
  for a ``threadloom run`` that stores a job and runs it at all;
- ``preflight_ms``: the connection check alone, in this process;
- ``anthropic_import_s``: ``python -c "import anthropic"`` alone, which any ``anthropic:`` job
  pays before its check (the SDK is imported when the model is made).

Prints one JSON document (ratio dead/baseline, the goal, the load average). Before this check
the dead job took ~17 s (five attempts per thread with backoff, then the lead's). Nothing here
asserts on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from workers.providers._preflight import unreachable

GOAL_S = 2.0


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _job(root: Path, name: str, model: str) -> Path:
    (root / "ws").mkdir(exist_ok=True)
    path = root / f"{name}.toml"
    path.write_text(f'[job]\nname = "{name}"\ngoal = "g"\nworkspace = "ws"\nmodel = "{model}"\n')
    return path


def _time(root: Path, job: Path, db: str, expect: int, env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--db", str(root / db), "run", str(job)],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, **(env or {})},
    )
    took = time.perf_counter() - start
    if proc.returncode != expect:
        raise SystemExit(f"{job.name}: exit {proc.returncode}, expected {expect}: {proc.stderr}")
    return took


def _import_anthropic() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import anthropic"], check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dead-") as tmp:
        root = Path(tmp)
        url = f"http://127.0.0.1:{_closed_port()}/v1"
        (root / "s.json").write_text(
            json.dumps({"rules": [{"match": "", "turns": [{"text": "ok"}]}]})
        )
        dead = _job(root, "dead", f"openai:m@{url}")
        base = _job(root, "base", "scripted:s.json")
        dead_a = _job(root, "dead_a", "anthropic:m")
        anthropic = {"ANTHROPIC_BASE_URL": url.removesuffix("/v1"), "ANTHROPIC_API_KEY": "x"}
        times: dict[str, list[float]] = {
            "dead": [],
            "dead_anthropic": [],
            "import": [],
            "baseline": [],
        }
        for i in range(args.rounds):
            times["dead"].append(_time(root, dead, f"d{i}.db", 4))
            times["dead_anthropic"].append(_time(root, dead_a, f"a{i}.db", 4, anthropic))
            times["import"].append(_import_anthropic())
            times["baseline"].append(_time(root, base, f"b{i}.db", 0))
            print(f"round {i + 1}/{args.rounds}", file=sys.stderr)
        checks = []
        for _ in range(20):
            start = time.perf_counter()
            assert asyncio.run(unreachable(f"{url}/chat/completions")) is not None
            checks.append(time.perf_counter() - start)
    dead_s = statistics.median(times["dead"])
    dead_a_s = statistics.median(times["dead_anthropic"])
    base_s = statistics.median(times["baseline"])
    print(
        json.dumps(
            {
                "dead_s": round(dead_s, 3),
                "baseline_s": round(base_s, 3),
                "dead_anthropic_s": round(dead_a_s, 3),
                "dead_over_baseline": round(dead_s / base_s, 3),
                "dead_anthropic_over_baseline": round(dead_a_s / base_s, 3),
                "preflight_ms": round(statistics.median(checks) * 1000, 3),
                "anthropic_import_s": round(statistics.median(times["import"]), 3),
                "goal_s": GOAL_S,
                "meets_goal": max(dead_s, dead_a_s) < GOAL_S,
                "rounds": args.rounds,
                "loadavg": [round(x, 2) for x in os.getloadavg()],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
