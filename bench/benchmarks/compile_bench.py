"""Eager vs torch.compile (inductor) on openreg: forward time of an MLP and a small transformer block.

Prints a table and writes JSON (--json PATH). Runs at the default configuration; eager and compiled
are timed alternately, three times each, and the medians compared. A model that Inductor cannot
compile for openreg yet is reported as an error row, not hidden.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch_openreg  # noqa: F401


def _time(fn, x, iters: int) -> float:
    for _ in range(3):
        fn(x)
    torch.openreg.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn(x)
    torch.openreg.synchronize()
    return (time.perf_counter() - start) / iters


def _models():
    mlp = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 512), torch.nn.GELU(),
        torch.nn.Linear(512, 64),
    )
    block = torch.nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, dropout=0.0, batch_first=True)
    return [("mlp", mlp, (64, 256)), ("transformer_block", block, (8, 32, 64))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iters", type=int, default=50)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    rows = []
    with torch.no_grad():
        for name, model, shape in _models():
            model = model.to("openreg").eval()
            x = torch.randn(*shape, device="openreg")
            row = {"model": name}
            try:
                compiled = torch.compile(model)
                eager_t, compiled_t = [], []
                for _ in range(3):
                    eager_t.append(_time(model, x, args.iters))
                    compiled_t.append(_time(compiled, x, args.iters))
                row["eager_ms"] = statistics.median(eager_t) * 1e3
                row["compiled_ms"] = statistics.median(compiled_t) * 1e3
                row["speedup"] = row["eager_ms"] / row["compiled_ms"]
            except Exception as err:  # noqa: BLE001 - reported in the table
                row["eager_ms"] = _time(model, x, args.iters) * 1e3
                row["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:120]}"
            rows.append(row)
    print(f"{'model':<20}{'eager ms':>10}{'compiled ms':>13}{'eager/compiled':>16}")
    for r in rows:
        if "error" in r:
            print(f"{r['model']:<20}{r['eager_ms']:>10.3f}  compile failed: {r['error']}")
        else:
            print(f"{r['model']:<20}{r['eager_ms']:>10.3f}{r['compiled_ms']:>13.3f}{r['speedup']:>16.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": "openreg", "iters": args.iters, "results": rows}, f, indent=2)


if __name__ == "__main__":
    main()
