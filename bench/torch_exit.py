"""The PyTorch peers' way out (bench/torch_ddp.py, bench/torch_gpt.py)."""
import os
import sys


def leave_without_teardown():
    """Exit now, everything printed, skipping the interpreter's teardown.

    PyTorch 1.13's DDP sometimes deadlocks there: ~Reducer → ~ProcessGroupGloo
    joins a gloo worker thread that waits for the GIL, which the destroying
    thread holds (seen with gdb: one rank left at 0 % CPU after the other exited).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)

