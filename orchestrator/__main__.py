"""``python -m orchestrator``: the ``threadloom`` command line."""

from orchestrator.cli import main

if __name__ == "__main__":
    main(prog_name="threadloom")
