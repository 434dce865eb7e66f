"""``python -m orchestrator``: the ``threadloom`` command line."""

from orchestrator.cli._entry import main

if __name__ == "__main__":
    main()
