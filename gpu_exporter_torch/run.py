"""``gpu-exporter-run``: run a command with the allocator publisher on, without changing its code.

    gpu-exporter-run [--dir DIR] [--interval SECONDS] [--] python train.py --lr 3e-4

Sets ``GPU_EXPORTER_TORCH=1`` (plus ``GPU_EXPORTER_TORCH_DIR``/``_INTERVAL`` when given) and
puts the hook directory first on ``PYTHONPATH``, then replaces itself with the command (exec),
so signals, exit status and the process tree are the command's own. Every Python >= 3.10
process the command starts (torchrun workers included) that uses CUDA through torch publishes
its own file; processes without torch publish nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from gpu_exporter_torch import ENV_DIR, ENV_ENABLE, ENV_INTERVAL, hook_dir


def environment(
    base: dict[str, str], directory: str | None = None, interval: float | None = None
) -> dict[str, str]:
    """``base`` with the publisher switched on (the hook directory first on PYTHONPATH)."""
    env = dict(base)
    env[ENV_ENABLE] = "1"
    if directory:
        env[ENV_DIR] = directory
    if interval is not None:
        env[ENV_INTERVAL] = repr(float(interval))
    hook = hook_dir()
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != hook]
    env["PYTHONPATH"] = os.pathsep.join([hook, *parts])
    return env


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0.5:
        raise argparse.ArgumentTypeError(f"interval must be at least 0.5 s, got {text!r}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="gpu-exporter-run",
        description="Run COMMAND with PyTorch allocator statistics published for gpu-exporter.",
    )
    parser.add_argument("--dir", help=f"shared directory (default ${ENV_DIR} or the built-in)")
    parser.add_argument("--interval", type=_positive_seconds, help="seconds between writes")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="the command to run")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given (e.g. gpu-exporter-run python train.py)")
    env = environment(dict(os.environ), args.dir, args.interval)
    try:
        os.execvpe(command[0], command, env)
    except OSError as err:
        print(f"gpu-exporter-run: cannot run {command[0]!r}: {err.strerror}", file=sys.stderr)
        return 127
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main())
