"""One OpenBLAS core for both sides of a comparison: the best one for this CPU.

PyTorch's Linear layers and hpctrain's thin GEMMs run in the same OpenBLAS, whose
core comes from OPENBLAS_CORETYPE or else its own CPU detection, which picks
Prescott's kernels on some masked Xeons. hpctrain corrects a lesser detected
core at start-up (its `BLAS core:` line); PyTorch does not. And an environment
may set OPENBLAS_CORETYPE (or OPENBLAS_L2_SIZE) for every process: a benchmark
that inherited it would measure both sides on that core. So the drivers drop
both variables, ask hpctrain which core it runs without them, and give that
core to every process they start, hpctrain and PyTorch alike; `--blas-core NAME`
chooses another one for both. The note says what was done, for the report.
"""
import os
import re
import subprocess

INHERITED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def fitted_core(build):
    """The core hpctrain runs with no OpenBLAS variables set (its check corrects a lesser one), or None."""
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    try:
        out = subprocess.run([os.path.join(build, "hpctrain"), "--version"], env=env, capture_output=True,
                             text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"BLAS core: +([A-Za-z0-9_]+)", out)
    return m.group(1) if m else None


def comparison_env(build, env, core=None):
    """(env with one core for everyone, a one-line note of what was dropped and chosen)."""
    dropped = [f"{k}={env[k]}" for k in INHERITED if k in env]
    env = {k: v for k, v in env.items() if k not in INHERITED}
    chosen = core or fitted_core(build)
    if chosen:
        env["OPENBLAS_CORETYPE"] = chosen
    how = "given with --blas-core" if core else "hpctrain's fitted core" if chosen else "OpenBLAS's own choice"
    note = f"OpenBLAS core for hpctrain and PyTorch alike: {chosen or 'unset'} ({how})"
    if dropped:
        note += f"; dropped from the environment: {', '.join(dropped)}"
    return env, note
