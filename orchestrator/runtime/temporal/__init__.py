"""Worker runs on many hosts through Temporal (README §Scale-out). Only ids cross the wire:
the store (a PostgreSQL database every host shares) is the source of truth.

- ``workflow``: the one-activity workflow per worker run and what it carries;
- ``executor``: the lead's side (``executors.TemporalExecutor``): start or reattach, wait, cancel;
- ``host``: ``threadloom worker``'s side: the activity that takes the thread's lease and runs it.

Imported only when a job's executor is ``temporal`` or a host runs ``threadloom worker``.
"""
