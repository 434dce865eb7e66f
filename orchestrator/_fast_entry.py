"""Imported first by ``orchestrator.cli``: in the ``threadloom`` process itself, runs ``ls``,
``show``, ``search`` and ``tree`` on the fast path and exits before click is imported
(``_fast.early``); anywhere else, and for any other command line, importing it does nothing."""

from __future__ import annotations

from ._fast import early

early()
