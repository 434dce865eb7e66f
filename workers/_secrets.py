"""The process's secrets: taken out of the environment at start and held here, in one place.

Root reads any process's ``/proc/PID/environ`` (``PR_SET_DUMPABLE`` does not stop it), and what
it shows is the environment a process was *started* with — the bytes the kernel put on its
stack at ``exec`` — whatever the process did to ``os.environ`` since. A worker's ``bash`` with
the plain runner (``sandbox = "none"``) running as root could read threadloom's API keys there.
So the ``threadloom`` command calls ``take_secrets()`` before anything else:

- every secret variable (``is_secret``: a name containing KEY, SECRET, TOKEN or PASSWORD, one of
  ``CONFIGURED_KEYS``, a value holding a credential URL ``scheme://user:password@…``, or a value
  that contains another secret's value) leaves ``os.environ`` — and with it the C environment,
  so nothing threadloom spawns (git, bash, a Temporal dev server, an MCP subprocess) inherits
  it — and is kept in this module;
- its ``NAME=value`` bytes in the kernel's copy are overwritten with NULs, in place (through
  ``/proc/self/mem``, else ``ctypes``), so ``/proc/<threadloom pid>/environ`` shows neither name
  nor value. The copy is read back to check; a secret still visible is said on stderr, never
  kept quiet.

Why in place and not a re-exec with a scrubbed environment and the secrets on a pipe: the
kernel shows exactly the bytes overwritten here, so the result is the same, for a few system
calls (tens of microseconds, and nothing at all when no secret is set) instead of a second
interpreter start and a second import of whatever ran before it.

Readers ask ``env_var(NAME)``: the environment first (a value set after start, by an embedding
program or a test, is the newer word), then what was taken. The providers read their API keys
so, the redaction its configured secret values (``taken_secrets()``), the bash tool its scrub, the
command line the database URL (``THREADLOOM_DB`` may hold a password).

Standard library only and cheap to import: the command's fast path runs it first.
"""

from __future__ import annotations

import functools
import os
import re
import sys

SECRET_NAME_MARKERS = ("KEY", "SECRET", "TOKEN", "PASSWORD")
"""A variable whose name contains one of these (any case) holds a secret."""
CONFIGURED_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "ANTHROPIC_AUTH_TOKEN")
CREDENTIAL_URL = r"[A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*:[^/\s@]+@"
"""``scheme://user:password@…`` (``THREADLOOM_DB=postgresql://u:pw@host/db``, a proxy URL);
compiled on first use (``_credential_url``): the command imports this module first thing."""
MIN_SECRET_CHARS = 8
"""A secret value shorter than this is not looked for inside other values (too many matches)."""

_taken: dict[str, str] = {}

# /proc/PID/stat fields after the command name, counted from field 3 (state): env_start is
# field 50 and env_end field 51 (proc(5)); both readable for our own process
_ENV_START = 50 - 3
_ENV_END = 51 - 3


def secret_name(name: str) -> bool:
    """Whether a variable of this name holds a secret, whatever its value."""
    upper = name.upper()
    return name in CONFIGURED_KEYS or any(m in upper for m in SECRET_NAME_MARKERS)


@functools.cache
def _credential_url() -> re.Pattern[str]:
    return re.compile(CREDENTIAL_URL)


def is_secret(name: str, value: str) -> bool:
    """Whether the variable ``name=value`` holds a secret (by its name, or a credential URL)."""
    return secret_name(name) or ("://" in value and _credential_url().search(value) is not None)


def secret_variables(environ: dict[str, str]) -> dict[str, str]:
    """The secret variables of ``environ``: ``is_secret`` ones, and any whose value contains
    one of their values (``X_HEADERS="x-api-key: sk-…"``)."""
    found = {k: v for k, v in environ.items() if is_secret(k, v)}
    values = [v for v in found.values() if len(v.strip()) >= MIN_SECRET_CHARS]
    if values:
        for k, v in environ.items():
            if k not in found and any(s in v for s in values):
                found[k] = v
    return found


def env_var(name: str) -> str | None:
    """The variable as threadloom was started with it: ``os.environ``, else the secret taken
    from it at start; None when neither has it."""
    value = os.environ.get(name)
    return value if value is not None else _taken.get(name)


def taken_secrets() -> dict[str, str]:
    """The secrets taken out of the environment so far (a copy), by name."""
    return dict(_taken)


def take_secrets() -> tuple[str, ...]:
    """Move every secret variable from the environment into this module and erase it from the
    environment the kernel shows for this process; returns the names taken (sorted). Safe to
    call again: a later call takes what was set since."""
    found = secret_variables(dict(os.environ))
    if not found:
        return ()
    import posix

    for name, value in found.items():
        _taken[name] = value
        os.environ.pop(name, None)  # unsetenv too: the C environment children inherit
        posix.environ.pop(os.fsencode(name), None)  # the interpreter's own copy from start
    problem = _erase_from_kernel_view()
    if problem:
        sys.stderr.write(
            f"threadloom: warning: secrets are still visible in /proc/{os.getpid()}/environ: "
            f"{problem}\n"
        )
    return tuple(sorted(found))


def _erase_from_kernel_view() -> str | None:
    """Overwrite the secret entries of this process's start-up environment block with NULs;
    returns what went wrong, or None (also when there is no ``/proc``: then nothing shows it)."""
    try:
        spans, start = _secret_spans()
    except FileNotFoundError:
        return None
    except (OSError, ValueError, IndexError) as exc:
        return f"cannot read the environment block ({exc})"
    if not spans:
        return None
    try:
        fd = os.open("/proc/self/mem", os.O_RDWR)
        try:
            for offset, size in spans:
                os.pwrite(fd, bytes(size), start + offset)
        finally:
            os.close(fd)
    except OSError:
        # a kernel or security module that refuses /proc/self/mem: it is our own writable
        # stack, so write it directly
        try:
            import ctypes

            for offset, size in spans:
                ctypes.memset(start + offset, 0, size)
        except (ImportError, OSError, ValueError) as exc:
            return f"cannot overwrite it ({exc})"
    try:
        left, _ = _secret_spans()
    except OSError as exc:
        return f"cannot read it back ({exc})"
    return f"{len(left)} entries left after overwriting" if left else None


def _secret_spans() -> tuple[list[tuple[int, int]], int]:
    """(offset, size) of every secret ``NAME=value`` entry in ``/proc/self/environ``, and the
    block's address."""
    with open("/proc/self/environ", "rb") as f:
        block = f.read()
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    fields = stat[stat.rindex(b")") + 2 :].split()
    start, end = int(fields[_ENV_START]), int(fields[_ENV_END])
    if end - start < len(block):
        raise ValueError(f"the block is {end - start} bytes, /proc shows {len(block)}")
    entries: dict[str, str] = {}
    places: list[tuple[str, int, int]] = []
    offset = 0
    for raw in block.split(b"\0"):
        name, eq, value = raw.partition(b"=")
        if eq:
            key, text = os.fsdecode(name), os.fsdecode(value)
            entries.setdefault(key, text)
            places.append((key, offset, len(raw)))
        offset += len(raw) + 1
    secret = set(secret_variables(entries)) | set(_taken)
    return [(off, size) for key, off, size in places if key in secret], start
