"""``run``'s report, worker summaries and progress lines are model-written text: no control
sequence in them reaches the terminal (or a pipe a terminal reads)."""

from __future__ import annotations

import json

from tests.e2e.conftest import Env, submit

HOSTILE = "\x1b]0;pwned\x07\x1b]52;c;ZXZpbA==\x07ok\r\x1b[2KFAKE: all 39 tests passed\u202e"


def test_the_run_report_and_progress_show_control_characters_visibly(env: Env) -> None:
    job = env.job(
        "esc",
        [
            {"match": "Job: esc", "turns": [{"text": f"report {HOSTILE}"}]},
            {"match": "(?m)^Task a:", "turns": [submit(f"summary {HOSTILE}")]},
        ],
        # a title is one line (no \r: refused), but may hold any other control character
        [{"id": "a", "title": f"title {HOSTILE.replace(chr(13), '')}", "prompt": "p"}],
    )
    res = env.run("-v", "run", str(job))
    assert res.code == 0, res.stderr
    for stream in (res.stdout, res.stderr):
        assert not any(c in stream for c in "\x1b\x07\r\u202e"), repr(stream[-800:])
    assert "report ^[]0;pwned^G" in res.stdout
    assert "summary ^[]0;pwned" in res.stdout
    # the record keeps the bytes as the model wrote them
    lead = env.run("--json", "ls", "--kind", "lead").json[0]["ref"]
    exported = env.run("export", lead)
    texts = [
        block.get("text", "")
        for line in exported.stdout.splitlines()
        for block in json.loads(line)["content"]
        if isinstance(block, dict)
    ]
    assert f"report {HOSTILE}" in texts
