"""A job larger than one context is a chain of threads (SPEC "Jobs larger than one context"): a
lead whose next request would exceed its ceiling hands off — it ends ``done`` with
``continued_by`` — and a successor of the same job and kind takes over with ``continues``; a
worker the same way. What the doors need of a chain beyond ``views.tree_json``'s layout."""

from __future__ import annotations

from store import Store, ThreadInfo


async def newest(store: Store, info: ThreadInfo) -> ThreadInfo:
    """The newest thread of ``info``'s chain: ``info`` unless it handed off, else its
    successor's newest — any lead of a job leads to the job's current lead, a worker that
    handed off to its task's current worker (what ``resume`` runs). Its ``continued_by``
    followed to the end (a thread is never visited twice)."""
    seen = {info.id}
    while info.continued_by is not None and info.continued_by not in seen:
        info = await store.get_thread(info.continued_by)
        seen.add(info.id)
    return info
