"""``threadloom serve`` and ``threadloom export --format html`` as a user runs them: the real
command in a subprocess (the server on a loopback port, stopped with Ctrl-C), and the one-line
error when the web extra is missing."""

from __future__ import annotations

import importlib.util
import json
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import markupsafe
import pytest
from click.testing import CliRunner

from orchestrator.cli import main
from tests.orchestrator.test_cli_helpers import clean_env, run_cli

from ._data import HUGE_CHARS, Refs
from ._serve import serving


@pytest.fixture
def server(db: tuple[str, Refs]) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    with serving(db[0], "serve", "--port", "0") as (line, proc):
        found = re.search(r"serving (http://127\.0\.0\.1:\d+)/ \(read-only", line)
        assert found, line
        yield found.group(1), proc


def test_serve_serves_the_database_on_the_loopback_and_stops_on_ctrl_c_with_130(
    server: tuple[str, subprocess.Popen[str]], refs: Refs
) -> None:
    url, proc = server
    page = httpx.get(f"{url}/t/{refs.worker}", timeout=30)
    assert page.status_code == 200 and "Fix the tokenizer tests" in page.text
    assert httpx.get(f"{url}/", headers={"host": "example.com"}, timeout=30).status_code == 400
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 130  # SPEC: stopped by Ctrl-C
    assert proc.stderr is not None and "Traceback" not in proc.stderr.read()


def test_serve_on_a_port_in_use_is_one_line_and_exit_2(db: tuple[str, Refs]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = run_cli("serve", "--port", str(port), db=db[0])
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"threadloom: error: serve: cannot listen on 127.0.0.1:{port}: Address already in use"
    ]


@pytest.mark.parametrize("host", ["", "  "])
@pytest.mark.parametrize("as_json", [False, True])
def test_serve_with_an_empty_host_is_a_usage_error_not_every_interface(
    db: tuple[str, Refs], host: str, as_json: bool
) -> None:
    # an empty --host (an unset shell variable) bound 0.0.0.0 with the Host check off
    flags = ["--json"] if as_json else []
    with serving(db[0], *flags, "serve", "--host", host, "--port", "0") as (line, proc):
        assert "serving" not in line, line
        out, rest = proc.communicate(timeout=30)
    assert proc.returncode == 2
    expected = "Invalid value for '--host': must not be empty"
    if as_json:
        error = json.loads(out)["error"]
        assert error["code"] == 2 and error["message"].startswith(expected)
    else:
        assert out == "" and rest == ""
        assert line.startswith(f"threadloom: error: {expected}") and line.endswith(")\n")


def test_serve_names_a_host_it_cannot_resolve(db: tuple[str, Refs]) -> None:
    done = run_cli("serve", "--host", "nonexistent.invalid", "--port", "0", db=db[0])
    assert done.returncode == 2
    [line] = done.stderr.splitlines()
    assert line.startswith("threadloom: error: serve: cannot resolve host 'nonexistent.invalid': ")
    assert "Unknown error" not in line
    as_json = run_cli("--json", "serve", "--host", "nonexistent.invalid", db=db[0])
    message = json.loads(as_json.stdout)["error"]["message"]
    assert message.startswith("serve: cannot resolve host 'nonexistent.invalid': ")


@pytest.mark.parametrize("host", ["LOCALHOST", "2130706433"])
def test_a_loopback_address_spelt_otherwise_still_refuses_a_foreign_host_header(
    db: tuple[str, Refs], host: str
) -> None:
    # both bind 127.0.0.1; the check used to go by the spelling and so was off
    with serving(db[0], "serve", "--host", host, "--port", "0") as (line, _):
        found = re.search(rf"serving http://{host}:(\d+)/ \(read-only", line)
        assert found, line
        url = f"http://127.0.0.1:{found.group(1)}/"
        assert httpx.get(url, headers={"host": "evil.example"}, timeout=30).status_code == 400
        assert httpx.get(url, headers={"host": "localhost"}, timeout=30).status_code == 200
        assert httpx.get(url, headers={"host": host.lower()}, timeout=30).status_code == 200


@pytest.mark.parametrize(
    ("argv", "what"),
    [(["serve"], "serve"), (["export", "T-0000", "--format", "html"], "export --format html")],
)
def test_without_the_web_extra_serve_and_html_export_say_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], what: str
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name in ("jinja2", "starlette", "uvicorn") else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    result = CliRunner().invoke(main, ["--db", str(tmp_path / "t.db"), *argv])
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"threadloom: error: {what}: ")
    assert lines[0].endswith("not installed: pip install 'threadloom[web]'")


def test_export_html_is_one_self_contained_page_with_every_message_whole(
    db: tuple[str, Refs],
) -> None:
    done = run_cli("export", refs_of(db).worker, "--format", "html", db=db[0])
    assert done.returncode == 0, done.stderr
    html = done.stdout
    assert html.startswith("<!doctype html>")
    assert "<style>" in html and "article.msg" in html  # the stylesheet, inlined
    assert "<script" not in html and "<link" not in html
    assert "default-src 'none'" in html  # nothing can be fetched
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
    assert re.findall(r'<article class="msg \w+" id="(\d+)"', html) == list("123456")
    assert "x" * HUGE_CHARS in html  # an output stored apart, whole
    assert "line 150: FAILED" in html  # and a long inline one, uncapped


def test_export_html_of_a_range_and_of_hostile_text(db: tuple[str, Refs]) -> None:
    refs = refs_of(db)
    ranged = run_cli("export", f"{refs.worker}#2-3", "--format", "html", db=db[0]).stdout
    assert re.findall(r'<article class="msg \w+" id="(\d+)"', ranged) == ["2", "3"]
    hostile = run_cli("export", refs.hostile, "--format", "html", db=db[0])
    assert hostile.returncode == 0
    assert "<script" not in hostile.stdout and "\x1b" not in hostile.stdout
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in hostile.stdout


def refs_of(db: tuple[str, Refs]) -> Refs:
    return db[1]


def test_export_html_redact_masks_a_secret_that_escaping_would_spell_apart(
    db: tuple[str, Refs],
) -> None:
    # a configured secret holding characters HTML escapes: masked on the text itself, so
    # neither its raw nor its escaped spelling reaches the page
    secret = "tok<&'\"-0123456789abcdef"
    env = clean_env(DEPLOY_TOKEN=secret)
    line = json.dumps({"role": "user", "content": f"the token is {secret} (keep it)"})
    made = run_cli("--json", "import", "-", db=db[0], stdin=line + "\n", env=env)
    assert made.returncode == 0, made.stderr
    ref = json.loads(made.stdout)["ref"]
    escaped = str(markupsafe.escape(secret))  # as the templates escape it
    shown = run_cli("export", ref, "--format", "html", db=db[0], env=env)
    assert shown.returncode == 0 and escaped in shown.stdout  # the record, unredacted
    masked = run_cli("export", ref, "--format", "html", "--redact", db=db[0], env=env)
    assert masked.returncode == 0, masked.stderr
    assert "the token is [REDACTED] (keep it)" in masked.stdout
    assert escaped not in masked.stdout and secret not in masked.stdout
    assert "0123456789abcdef" not in masked.stdout


def _hrefs(html: str) -> list[str]:
    return re.findall(r'href="([^"]*)"', html)


def test_an_exported_page_links_its_own_messages_by_anchor_and_nothing_to_a_dead_path(
    db: tuple[str, Refs],
) -> None:
    refs = refs_of(db)
    html = run_cli("export", refs.worker, "--format", "html", db=db[0]).stdout
    assert '<a class="ref" href="#3">' in html  # the finding's evidence, in this file
    assert all(h.startswith("#") for h in _hrefs(html)), _hrefs(html)
    # the parent, the job and the fork are elsewhere: their refs, as text
    assert f'<code class="ref">{refs.lead}</code>' in html
    assert f'<code class="ref">{refs.fork}</code>' in html
    # a range without message 3: its evidence is elsewhere too
    ranged = run_cli("export", f"{refs.worker}#4-6", "--format", "html", db=db[0]).stdout
    assert f'<code class="ref">{refs.worker}#3</code>' in ranged
    assert all(h.startswith("#") for h in _hrefs(ranged)), _hrefs(ranged)


def test_an_export_with_a_base_url_links_other_threads_to_that_viewer(
    db: tuple[str, Refs],
) -> None:
    refs = refs_of(db)
    base = "http://127.0.0.1:8765"
    html = run_cli(
        "export", refs.worker, "--format", "html", "--base-url", base + "/", db=db[0]
    ).stdout
    assert '<a class="ref" href="#3">' in html  # in the file: still its anchor
    assert f'href="{base}/t/{refs.lead}"' in html and f'href="{base}/job/{refs.lead}"' in html
    assert f'href="{base}/t/{refs.fork}"' in html
    assert all(h.startswith(("#", base + "/")) for h in _hrefs(html)), _hrefs(html)
    ranged = run_cli(
        "export", f"{refs.worker}#4-6", "--format", "html", "--base-url", base, db=db[0]
    ).stdout
    assert f'<a class="ref" href="{base}/t/{refs.worker}#3">' in ranged
    # a fork's inherited messages say where they came from, on that thread's page
    fork = run_cli("export", refs.fork, "--format", "html", "--base-url", base, db=db[0]).stdout
    assert f'from <a class="ref" href="{base}/t/{refs.worker}#1">' in fork


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--format", "html", "--base-url", "javascript:alert(1)"], "http:// or https://"),
        (["--format", "html", "--base-url", "http://h/x?y=1"], "no query"),
        (["--format", "html", "--base-url", 'http://h/"onload="x'], "no query"),
        (["--format", "md", "--base-url", "http://h"], "--base-url is for --format html"),
    ],
)
def test_a_bad_base_url_is_one_line_and_exit_2(
    db: tuple[str, Refs], args: list[str], needle: str
) -> None:
    done = run_cli("export", refs_of(db).worker, *args, db=db[0])
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith("threadloom: error: ") and needle in line, line
