"""How long torch.compile takes to compile for openreg, against compiling the same program for the CPU.

Two programs, each compiled for the first time with a cold Inductor cache (a fresh TORCHINDUCTOR_CACHE_DIR
per measurement): the forward and backward of a small GPT-style transformer (embedding, two pre-norm
blocks with causal attention and a GELU MLP, tied head), and one AdamW step over its parameters
(`torch.compile(opt.step)`, as PyTorch's compiled-optimizer recipe does). Compile time is the wall time of
the first call, which traces, compiles every kernel and runs once, minus the time of a later call.
openreg is measured twice: computing (the default), and in timing-only execution on a device profile,
where its kernels are not built.

Every measurement is a fresh child process (openreg and Inductor keep state per process), CPU and openreg
alternating, REPEATS times each; the table shows the medians and their ratio. The default configuration
is measured: Inductor picks its compile workers from the machine's cores, as it does for users.

    python -m bench.benchmarks.compile_time_bench [--repeats 3] [--out bench/results/compile_time_bench.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

from bench.common.bench_process import ChildFailed, child_env, load_openreg, run_child, write_results

PROGRAMS = ("gpt_fwd_bwd", "adamw_step")
# "openreg-timing": openreg in timing-only execution on the H100 profile, where its kernels are not built
# (Note [Compiled kernels in timing-only execution] in python/torch_openreg/_inductor/__init__.py).
DEVICES = ("cpu", "openreg", "openreg-timing")
TIMING_ONLY = {"OPENREG_DEVICE_PROFILE": "h100-sxm", "OPENREG_EXECUTE": "timing"}


def _gpt(torch):
    nn = torch.nn
    F = torch.nn.functional

    class Block(nn.Module):
        def __init__(self, dim: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
            self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
            self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab: int = 256, dim: int = 64, heads: int = 4, layers: int = 2, ctx: int = 32):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(ctx, dim)
            self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(dim)

        def forward(self, idx, targets):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for block in self.blocks:
                x = block(x)
            logits = self.ln(x) @ self.tok.weight.t()
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    return GPT()


def _child(program: str, device: str) -> dict:
    """Measures one first compile in this (fresh) process; prints the result as JSON."""
    torch = load_openreg()
    torch.manual_seed(0)
    device = device.split("-")[0]
    model = _gpt(torch).to(device)
    idx = torch.randint(0, 256, (4, 32), device=device)
    sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
    if program == "gpt_fwd_bwd":
        compiled = torch.compile(model)

        def step():
            model.zero_grad(set_to_none=True)
            compiled(idx, idx).backward()
    else:
        model(idx, idx).backward()  # gradients for the optimizer to read
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        compiled_step = torch.compile(opt.step)

        def step():
            compiled_step()

    start = time.perf_counter()
    step()
    sync()
    first = time.perf_counter() - start
    start = time.perf_counter()
    step()
    sync()
    later = time.perf_counter() - start
    return {"first_s": first, "later_s": later, "compile_s": first - later}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="bench/results/compile_time_bench.json")
    parser.add_argument("--child", nargs=2, metavar=("PROGRAM", "DEVICE"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="one measurement of each")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(*args.child)))
        return
    repeats = 1 if args.quick else args.repeats
    samples: dict = {(p, d): [] for p in PROGRAMS for d in DEVICES}
    errors: dict = {}
    for _ in range(repeats):
        for program in PROGRAMS:
            for device in DEVICES:  # alternating, so a slow phase of the machine hits both
                with tempfile.TemporaryDirectory(prefix="openreg-compile-bench-") as cache:
                    env = child_env({"TORCHINDUCTOR_CACHE_DIR": cache,
                                     **(TIMING_ONLY if device == "openreg-timing" else {})})
                    try:
                        samples[program, device].append(
                            run_child(__spec__.name, ["--child", program, device], env)["compile_s"])
                    except ChildFailed as err:
                        errors[program, device] = err.last_error_line()
    rows = []
    print(f"{'program':<14}{'cpu compile s':>15}{'openreg compile s':>19}{'openreg/cpu':>13}"
          f"{'timing-only s':>15}{'timing-only/cpu':>17}")
    for program in PROGRAMS:
        cpu, openreg, timing = (samples[program, d] for d in DEVICES)
        if not cpu or not openreg or not timing:
            why = next((errors[program, d] for d in DEVICES if (program, d) in errors), None)
            print(f"{program:<14}  failed: {why}")
            rows.append({"program": program, "error": why})
            continue
        row = {"program": program, "cpu_s": statistics.median(cpu), "openreg_s": statistics.median(openreg),
               "timing_only_s": statistics.median(timing), "cpu_samples": cpu, "openreg_samples": openreg,
               "timing_only_samples": timing}
        row["ratio"] = row["openreg_s"] / row["cpu_s"]
        row["timing_only_ratio"] = row["timing_only_s"] / row["cpu_s"]
        rows.append(row)
        print(f"{program:<14}{row['cpu_s']:>15.2f}{row['openreg_s']:>19.2f}{row['ratio']:>13.2f}"
              f"{row['timing_only_s']:>15.2f}{row['timing_only_ratio']:>17.2f}")
    torch = load_openreg()
    from torch._inductor.config import decide_compile_threads

    write_results({"repeats": repeats, "compile_threads": decide_compile_threads(), "cores": os.cpu_count(),
                   "torch": torch.__version__, "results": rows}, args.out)


if __name__ == "__main__":
    main()
