"""The process limit of ``bash`` (issue 22 item 13): no command holds more than ``PIDS_MAX``
processes and threads, under bubblewrap or the plain runner, whatever cgroups the host has.

Real fork and thread bombs (bounded, so a failing test cannot take the machine down) run through
``BashTool`` on this host: with its pids cgroup (here a cgroup v1 ``pids`` hierarchy; a v2 host
runs the same tests on v2), and with ``THREADLOOM_CGROUP=none`` — the setting that makes
threadloom use no cgroup, as on a host where none is usable — where, as root, the supervisor
must kill the command. The cgroup v2 set-up is also run against a directory laid out as a
cgroup2 hierarchy, since this host's pids controller is bound to v1 (a controller lives on one
hierarchy at a time) and its v2 mount has none: that shows what is written where, not that the
kernel enforces it — the bombs do that, on whichever hierarchy the host has. As ``nobody`` the
escape corpus runs its bombs under ``RLIMIT_NPROC``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest

from tests.faults._corpus import survivors
from workers.tools import BashTool, ToolContext, sandbox_status
from workers.tools._pids import (
    CGROUP_ENV,
    PIDS_MAX,
    cgroup_hierarchies,
    make_group,
    process_limit,
)

HELPER = Path(__file__).resolve().parents[2] / "workers" / "tools" / "_exec_helper.py"
ROOT = os.geteuid() == 0

FORK_BOMB = """
import os, signal, sys
n = 0
for i in range({target}):
    try:
        pid = os.fork()
    except OSError as e:
        print("LIMIT", n, e.errno, flush=True)
        sys.exit(0)
    if pid == 0:
        signal.pause()
        os._exit(0)
    n += 1
print("FORKED", n, flush=True)
signal.pause()  # hold them all: only the limit ends this
"""

THREAD_BOMB = """
import threading, time, signal
n = 0
try:
    for i in range({target}):
        threading.Thread(target=time.sleep, args=(600,), daemon=True).start()
        n += 1
except RuntimeError as e:
    print("LIMIT", n, e, flush=True)
    raise SystemExit(0)
print("STARTED", n, flush=True)
signal.pause()
"""


BASH_BOMB = (
    # doubling every level: 2^11 processes at most, so a broken limit cannot melt the machine
    ": {tag}; b(){{ if [ $1 -lt 11 ]; then b $(($1+1)) & b $(($1+1)) & fi; sleep 5; }}; "
    "b 0; wait; echo BOMB-ENDED"
)


def _bash_bomb_ended(text: str) -> bool:
    """How a ``BASH_BOMB`` that met the limit ends on its own: its last shell reaches the echo,
    or (on a loaded machine, where bash's retries of a refused fork run out first) bash gives
    the fork up itself ('fork: Resource temporarily unavailable', 'fork: Interrupted system
    call')."""
    return "BOMB-ENDED" in text or re.search(r"fork: (Resource|Interrupted)", text) is not None


def _modes() -> list[str]:
    return ["none", "required"] if sandbox_status().available or os.environ.get("CI") else ["none"]


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


async def _bomb(ws: Path, bomb: str, sandbox: str) -> tuple[str, bool]:
    """Runs a bomb (a Python script, or ``BASH_BOMB``); returns (output, is_error) after
    checking that nothing of it is left."""
    tag = f"tlbomb{uuid.uuid4().hex[:10]}"
    if bomb == BASH_BOMB:
        command = bomb.format(tag=tag)
    else:
        (ws / "bomb.py").write_text(bomb.format(target=PIDS_MAX + 300))
        command = f"python3 bomb.py {tag}"
    ctx = ToolContext(workspace=ws, sandbox=sandbox)  # type: ignore[arg-type]
    out = await BashTool().invoke({"command": command, "timeout_s": 120}, ctx)
    assert not survivors(tag), "processes of the bomb outlived the command"
    return out.text, out.is_error


@pytest.mark.skipif(not ROOT, reason="a pids cgroup is made by root")
def test_this_host_gets_a_pids_cgroup_from_its_mounts() -> None:
    limit = process_limit()
    assert limit.how == "cgroup", limit.describe()
    assert limit.group is not None and limit.group.name == f"run-{os.getpid()}"
    assert int((limit.group / "pids.max").read_text()) == PIDS_MAX
    mounts = Path("/proc/self/mounts").read_text()
    assert (limit.version, limit.group.parents[1]) in cgroup_hierarchies(mounts)


@pytest.mark.parametrize("sandbox", _modes())
@pytest.mark.parametrize(
    "bomb", [FORK_BOMB, THREAD_BOMB, BASH_BOMB], ids=["forks", "threads", "bash"]
)
async def test_a_bomb_meets_the_kernel_limit(ws: Path, sandbox: str, bomb: str) -> None:
    """With the host's pids cgroup (root) or RLIMIT_NPROC (not root), the kernel refuses the
    fork (or thread) past the limit: the bomb sees the error and ends on its own."""
    if sandbox == "required" and not sandbox_status().available:
        pytest.fail(f"CI runs the sandbox: {sandbox_status().reason}")
    text, is_error = await _bomb(ws, bomb, sandbox)
    assert not is_error, text[-2000:]
    if bomb == BASH_BOMB:  # bash waits and retries a refused fork (EAGAIN) until one is free
        assert "fork: retry: Resource temporarily unavailable" in text, text[-2000:]
        assert "[timed out" not in text, text[-2000:]  # it ended on its own
        assert _bash_bomb_ended(text), text[-2000:]
        return
    assert "LIMIT" in text, text[-2000:]
    started = int(text.split("LIMIT")[1].split()[0])
    assert started < PIDS_MAX + 300


@pytest.mark.skipif(not ROOT, reason="the supervisor is root's: RLIMIT_NPROC binds everyone else")
@pytest.mark.parametrize("sandbox", _modes())
@pytest.mark.parametrize(
    "bomb", [FORK_BOMB, THREAD_BOMB, BASH_BOMB], ids=["forks", "threads", "bash"]
)
async def test_without_a_cgroup_the_supervisor_kills_a_bomb_as_root(
    ws: Path, sandbox: str, bomb: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``THREADLOOM_CGROUP=none``: no cgroup, and root is exempt from RLIMIT_NPROC — the bomb
    could hold every process it starts (the Python ones 300 past the limit, then they wait for
    ever; bash's up to 2^11); the supervisor kills all of it and says why in the output."""
    if sandbox == "required" and not sandbox_status().available:
        pytest.fail(f"CI runs the sandbox: {sandbox_status().reason}")
    monkeypatch.setenv(CGROUP_ENV, "none")
    limit = process_limit()
    assert limit.how == "supervisor" and "THREADLOOM_CGROUP=none" in limit.describe()
    text, is_error = await _bomb(ws, bomb, sandbox)
    assert not is_error, text[-2000:]  # not the timeout: the supervisor ended it
    assert "killed by SIGKILL" in text and "more than 512 processes and threads" in text, text
    held = int(text.split("(counted ")[1].split(")")[0])
    assert held > PIDS_MAX


@pytest.mark.skipif(not ROOT, reason="the supervisor is root's")
async def test_the_supervisor_leaves_an_ordinary_command_alone(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CGROUP_ENV, "none")
    ctx = ToolContext(workspace=ws, sandbox="none")
    cmd = "for i in $(seq 50); do (sleep 0.2 &) ; done; wait; echo fine"
    out = await BashTool().invoke({"command": cmd, "timeout_s": 60}, ctx)
    assert not out.is_error and "fine" in out.text and "[exit code: 0]" in out.text, out.text


async def test_an_unknown_cgroup_setting_runs_nothing(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CGROUP_ENV, "sometimes")
    ctx = ToolContext(workspace=ws, sandbox="none")
    out = await BashTool().invoke({"command": "touch ran"}, ctx)
    assert out.is_error and "THREADLOOM_CGROUP='sometimes'" in out.text
    assert not (ws / "ran").exists()


def test_a_cgroup_that_cannot_be_joined_runs_nothing(tmp_path: Path) -> None:
    """The helper refuses the command (exit 126, one line) rather than run it unlimited."""
    marker = tmp_path / "ran"
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-S",
            str(HELPER),
            str(os.getpid()),
            f"cgroup:{tmp_path / 'gone' / 'cgroup.procs'}",
            "touch",
            str(marker),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 126 and not marker.exists()
    assert proc.stderr.startswith("bash: not run: cannot join the process-limit cgroup")


# --- where a cgroup is made -------------------------------------------------------------------

V2_HOST = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0
"""
V1_HOST = """\
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
cgroup /sys/fs/cgroup/pids cgroup rw,nosuid,nodev,noexec,relatime,pids 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
"""


def test_the_hierarchies_are_read_from_the_mounts() -> None:
    assert cgroup_hierarchies(V2_HOST) == [(2, Path("/sys/fs/cgroup"))]
    assert cgroup_hierarchies(V1_HOST) == [
        (2, Path("/sys/fs/cgroup/unified")),
        (1, Path("/sys/fs/cgroup/pids")),
    ]
    assert cgroup_hierarchies("proc /proc proc rw 0 0\n") == []


def _v2_tree(root: Path, controllers: str) -> Path:
    root.mkdir()
    (root / "cgroup.controllers").write_text(controllers + "\n")
    (root / "cgroup.subtree_control").write_text("\n")
    (root / "cgroup.procs").write_text("")
    return root


def test_a_v2_group_enables_pids_on_the_way_down(tmp_path: Path) -> None:
    """What the v2 set-up writes, on a directory laid out as a cgroup2 root (the kernel's
    files appear when the controller is enabled: here, made as the kernel would)."""
    root = _v2_tree(tmp_path / "cg", "cpuset cpu io memory pids")
    (root / "threadloom").mkdir()
    (root / "threadloom" / "cgroup.subtree_control").write_text("\n")
    stale = root / "threadloom" / "run-999999999"
    stale.mkdir()
    group = make_group(root, version=2)
    assert (root / "cgroup.subtree_control").read_text() == "+pids"
    assert (root / "threadloom" / "cgroup.subtree_control").read_text() == "+pids"
    assert group == root / "threadloom" / f"run-{os.getpid()}"
    assert (group / "pids.max").read_text() == str(PIDS_MAX)
    assert not stale.exists(), "the group of a dead process was not removed"


def test_a_v2_hierarchy_without_pids_is_passed_over(tmp_path: Path) -> None:
    root = _v2_tree(tmp_path / "cg", "cpu memory")
    with pytest.raises(Exception, match="pids controller is not available"):
        make_group(root, version=2)
    assert not (root / "threadloom").exists()
    unified = Path("/sys/fs/cgroup/unified")  # a hybrid host's real v2 mount, without pids
    controllers = unified / "cgroup.controllers"
    if controllers.is_file() and "pids" not in controllers.read_text().split():
        with pytest.raises(Exception, match="pids controller is not available"):
            make_group(unified, version=2)


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.mark.skipif(not ROOT, reason="switching to nobody takes root")
@pytest.mark.parametrize("bomb", ["fork", "bash"])
def test_as_nobody_the_plain_runner_meets_rlimit_nproc(bomb: str) -> None:
    """The plain runner's exec helper run as ``nobody`` with the limit ``_pids`` chooses for a
    user that is not root (``RLIMIT_NPROC`` at what nobody runs plus 512, asked of
    ``process_limit`` as nobody): the bomb meets EAGAIN from the kernel. (The helper is started
    here as threadloom starts it, but by setpriv: on a machine whose interpreter nobody cannot
    reach by itself — a pyenv under a 0700 /root — threadloom as nobody could not start it.)"""
    repo = HELPER.parents[2]
    asked = subprocess.run(
        [*NOBODY, sys.executable, "-c", "from workers.tools._pids import process_limit; "
         "print(process_limit().helper_arg(plain=True))"],
        cwd=repo, capture_output=True, text=True, check=False,
    )  # fmt: skip
    spec = asked.stdout.strip()
    assert spec.startswith("nproc:"), asked.stderr[-2000:]
    work = Path(tempfile.mkdtemp(dir="/var/tmp"))  # pytest's own tmp is root's alone (0700)
    try:
        work.chmod(0o777)
        (work / "bomb.py").write_text(FORK_BOMB.format(target=PIDS_MAX + 300))
        tag = f"tlnobody{uuid.uuid4().hex[:8]}"
        command = f"python3 bomb.py {tag}" if bomb == "fork" else BASH_BOMB.format(tag=tag)
        done = subprocess.run(
            [*NOBODY, sys.executable, "-I", "-S", str(HELPER), str(os.getpid()), spec,
             "bash", "-c", command],
            cwd=work, capture_output=True, text=True, timeout=120, check=False,
            start_new_session=True,
        )  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)
    out = done.stdout + done.stderr
    if bomb == "fork":
        assert "LIMIT" in out and "FORKED" not in out, out[-2000:]
    else:
        assert "fork: retry: Resource temporarily unavailable" in out, out[-2000:]
        assert _bash_bomb_ended(out), out[-2000:]  # the run's timeout did not end it
    assert not survivors(tag)


async def test_a_command_killed_by_sigkill_says_so_with_the_plain_runner(ws: Path) -> None:
    """The helper mirrors a signal death on itself; SIGKILL has no handler to reset, and
    trying made the helper fail with a traceback and exit code 1 (the supervisor's kill is a
    SIGKILL, so every kill past the limit read as an ordinary failure)."""
    ctx = ToolContext(workspace=ws, sandbox="none")
    out = await BashTool().invoke({"command": "echo before; kill -9 $$"}, ctx)
    assert "[exit code: -9 (killed by SIGKILL)]" in out.text and "Traceback" not in out.text
