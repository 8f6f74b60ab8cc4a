"""torchtitan configurations for sizing runs on openreg (``--module openreg_titan``, config_registry.py),
and the command line and log lines of such a run, shared by tests/ecosystem/test_torchtitan.py and
bench/sweeps/titan_sizing.py. Importing this package imports nothing of torchtitan's."""

from __future__ import annotations

import os
import re

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LINE = re.compile(
    r"step:\s*(\d+)\s.*memory:\s*([0-9.]+)GiB.*tps:\s*([0-9,]+)\s+tflops:\s*([0-9.]+)\s+mfu:\s*([0-9.]+)%")


def sizing_args(assets, out, config: str, steps: int, *extra) -> list[str]:
    """torchtitan's command line (after ``python``) for a sizing run of ``config``: its published
    configuration, read from the long-document stand-in dataset (each row one document, so attention
    costs what full causal attention does, on every rank: torchtitan_assets.py), one log line a step."""
    return [str(a) for a in (
        "-m", "torchtitan.train", "--module", "openreg_titan", "--config", config,
        "--hf-assets-path", os.path.join(assets, "tokenizer"),
        "--dataloader.dataset", "c4_test", "--dataloader.dataset-path", os.path.join(assets, "c4_long"),
        "--dump-folder", out, "--training.steps", steps, "--metrics.log-freq", 1,
        "--parallelism.spmd-backend", "partial_dtensor", "--debug.seed", 0,
        "--validator.no-enable", "--checkpoint.no-enable", "--profiler.no-enable-profiling",
        "--metrics.no-enable-tensorboard", "--metrics.disable-color-printing", *extra,
    )]


def log_lines(output: str) -> dict[int, list[tuple[float, float, float, float]]]:
    """Every rank's (memory GiB, tokens/s, TFLOPs, MFU %) per step, from torchtitan's log lines."""
    steps: dict[int, list[tuple[float, float, float, float]]] = {}
    for m in map(_LINE.search, _ANSI.sub("", output).splitlines()):
        if m:
            steps.setdefault(int(m.group(1)), []).append(
                (float(m.group(2)), float(m.group(3).replace(",", "")), float(m.group(4)), float(m.group(5))))
    return steps
