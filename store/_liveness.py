"""Whether a ``running`` thread still has a runner, so that every reader tells the truth.

A thread's status column says ``running`` from the moment its runner starts until the runner
writes a terminal status. A runner that is SIGKILLed (or whose host dies) never writes one, so
the column keeps saying ``running``. Readers (``get_thread``, ``resolve``, ``list_threads``: so
``ls``, ``show``, ``tree`` and the API) present such a thread as ``interrupted`` — resumable —
as soon as its runner is known to be gone:

- its lease has expired (a live runner renews it every third of its time to live), or
- its lease owner is a runner of this host (``host:pid:nonce``) whose process no longer
  exists or is a zombie. Runners on other hosts are never presumed dead before their lease
  expires.

The stored row is not changed by reading it (a reader never writes); the next runner's resume
takes the dead runner's lease over and moves the thread on from there.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .models import ThreadInfo

# Standard library only at import: the read-only fast path (``store.rawread``) applies the
# same rule to plain rows without loading pydantic.


def owner_is_dead(owner: str | None) -> bool:
    """True when ``owner`` is a runner of this host whose process no longer exists (it was
    killed): its lease need not be waited out. Runners on other hosts are never presumed dead."""
    if not owner:
        return False
    import socket

    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[-1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def lease_gone(
    status: str,
    lease_owner: str | None,
    lease_expires_at: datetime | None,
    now: datetime | None = None,
) -> bool:
    """A thread with this status and lease is ``running`` with its runner known to be gone
    (see the module docstring): the rule on plain values, for readers that have no model."""
    if status != "running" or lease_owner is None:
        return False
    if lease_expires_at is not None and lease_expires_at <= (now or datetime.now(UTC)):
        return True
    return owner_is_dead(lease_owner)


def runner_gone(info: ThreadInfo, now: datetime | None = None) -> bool:
    """A ``running`` thread whose runner is known to be gone (see the module docstring)."""
    return lease_gone(str(info.status), info.lease_owner, info.lease_expires_at, now)


def as_seen(info: ThreadInfo, now: datetime | None = None) -> ThreadInfo:
    """``info`` as readers should see it: ``interrupted`` when its runner is gone."""
    if runner_gone(info, now):
        from .models import Status

        return info.model_copy(update={"status": Status.INTERRUPTED})
    return info
