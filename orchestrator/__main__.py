"""``python -m orchestrator``: the ``threadloom`` command line."""

from orchestrator._fast_entry import main

if __name__ == "__main__":
    main()
