"""Speed of real models on openreg against CPU eager (issue 30 item 8): tiny Hugging Face GPT-2, Llama
and BERT, the sizes unit tests and CI use, built from transformers configs (no download).

Workloads (each model's dropout as its config has it, attention as transformers picks it: SDPA):
  train     one training step: forward with labels and an all-ones attention mask (what a tokenizer
            gives; without one transformers reads the ids back to look for padding, a host sync),
            backward, AdamW.step() with default arguments (foreach as PyTorch picks it per device:
            False on CPU, True on openreg), zero_grad(); batch 8 x 64 tokens
  generate  greedy generate() with the KV cache, 16 new tokens from a 4 x 32 prompt (causal LMs only;
            no end-of-sequence token, so every call makes all 16)

How: every measurement runs in a fresh child process of this script at the default configuration (no
OPENREG_* variable, PyTorch's default thread count); the parent alternates CPU and openreg children
REPS times per row, so load from other processes on a shared machine hits both devices alike. A child
builds the model (same seed on both devices), runs warm-up steps, then times chunks of steps (PLAN),
the openreg ones ending with torch.openreg.synchronize(); its figure is the median chunk per step, and
the row's figure is the median over its children. Prints ms per step on each device and openreg / CPU
(target <= 1.2); beside it the best ratio (fastest chunk of any process on each device: on a shared
machine the one least disturbed by other processes) and the ratio of the processes' CPU time per step
(all threads: openreg's host and device threads, CPU eager's intra-op threads, spinning included); and
writes JSON. On a machine shared with a busy process, CPU eager at its default thread count is bimodal
(an OpenMP team whose second thread is preempted waits at every barrier: up to 20x slower), so say how
loaded the machine was. --threads N measures a tuned configuration instead (N intra-op threads on CPU,
OPENREG_COMPUTE_THREADS=N), which that effect spares.

--profile MODEL WORKLOAD runs torch.profiler (CPU activity) over a few steps on each device, each in a
child of its own, and prints per-op calls and self CPU time side by side. On CPU an op's self time is
its dispatch and kernel; on openreg it is the host path only (dispatch, shape pass, enqueueing the work
item; the device threads' kernels are not recorded), or the wait of a sync (_copy_from under item()).
An op without an openreg kernel of its own shows twice on openreg (PyTorch's functional wrapper, then
the out= op that reaches openreg's engine), hence call counts up to twice CPU's.

Run with the ecosystem venv's Python (it has transformers and sees the system torch):
  build/ecosystem-venv/bin/python -m bench.benchmarks.model_speed_bench [--quick] [--only MODEL/WORKLOAD ...]
      [--threads N] [--out PATH] [--profile MODEL WORKLOAD [--top N]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

from bench.common.bench_process import ChildFailed, child_env, load_openreg, run_child, write_results
from bench.common.bench_table import TablePrinter

TARGET = 1.2
REPS = 5
QUICK_REPS = 3
VOCAB = 1024
TRAIN_BATCH, TRAIN_SEQ = 8, 64
GEN_BATCH, GEN_PROMPT, GEN_NEW = 4, 32, 16
ROWS = ["gpt2/train", "gpt2/generate", "llama/train", "llama/generate", "bert/train"]
# (warm-up steps, steps per chunk, chunks) per workload; --quick uses the second.
PLAN = {"train": ((5, 10, 5), (3, 5, 3)), "generate": ((3, 4, 5), (2, 2, 3))}
PROFILE_STEPS = {"train": 5, "generate": 2}
THREADS_VAR = "MODEL_SPEED_BENCH_THREADS"
STEP_MARK = "model_speed_bench.step"


def build_model(name: str) -> Any:
    """The model, on the CPU, in training mode (seeded: both devices start from the same weights)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    if name == "gpt2":
        model = GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_positions=128, n_embd=128, n_layer=2, n_head=4,
                                           bos_token_id=0, eos_token_id=None, pad_token_id=0))
    elif name == "llama":
        model = LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, hidden_size=128, intermediate_size=256,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=128, bos_token_id=0, eos_token_id=None,
                                             pad_token_id=0))
    elif name == "bert":
        model = BertForMaskedLM(BertConfig(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=2,
                                           num_attention_heads=4, intermediate_size=512,
                                           max_position_embeddings=128, pad_token_id=0))
    else:
        raise ValueError(f"unknown model {name!r}")
    return model.train()


def make_step(torch: Any, name: str, workload: str, dev: str) -> Callable[[], Any]:
    """One step of `workload` on `dev`, as a closure over the model and its inputs."""
    model = build_model(name).to(dev)
    gen = torch.Generator().manual_seed(1)
    if workload == "train":
        ids = torch.randint(1, VOCAB, (TRAIN_BATCH, TRAIN_SEQ), generator=gen).to(dev)
        mask = torch.ones_like(ids)  # what a tokenizer gives: without it transformers reads ids back (a sync)
        opt = torch.optim.AdamW(model.parameters())

        def train_step() -> Any:
            loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            return loss

        return train_step
    if workload == "generate" and name != "bert":
        model.eval()
        ids = torch.randint(1, VOCAB, (GEN_BATCH, GEN_PROMPT), generator=gen).to(dev)
        mask = torch.ones_like(ids)

        def generate_step() -> Any:
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=GEN_NEW, do_sample=False,
                                 use_cache=True, pad_token_id=0)
            assert out.shape[1] == GEN_PROMPT + GEN_NEW, out.shape
            return out

        return generate_step
    raise ValueError(f"no workload {workload!r} for {name!r}")


def _sync(torch: Any, dev: str) -> None:
    if dev != "cpu":
        torch.openreg.synchronize()


def child_measure(name: str, workload: str, dev: str, quick: bool) -> dict:
    """This process's figure for one row on one device: the median chunk's ms per step."""
    torch = load_openreg()
    _set_threads(torch)
    warm, steps, chunks = PLAN[workload][1 if quick else 0]
    step = make_step(torch, name, workload, dev)
    with torch.no_grad() if workload == "generate" else contextlib.nullcontext():
        for _ in range(warm):
            step()
        _sync(torch, dev)
        times, cpu_times = [], []
        for _ in range(chunks):
            t0, c0 = time.perf_counter(), time.process_time()
            for _ in range(steps):
                step()
            _sync(torch, dev)
            times.append((time.perf_counter() - t0) / steps * 1e3)
            cpu_times.append((time.process_time() - c0) / steps * 1e3)
    return {"ms": statistics.median(times), "chunks_ms": times, "process_cpu_ms": statistics.median(cpu_times),
            "threads": torch.get_num_threads()}


def _set_threads(torch: Any) -> None:
    """--threads N (a tuned configuration, not the default): N intra-op threads for CPU eager; the parent
    gives openreg OPENREG_COMPUTE_THREADS=N in the child's environment."""
    if os.environ.get(THREADS_VAR):
        torch.set_num_threads(int(os.environ[THREADS_VAR]))


def _env(threads: int | None) -> dict:
    if threads is None:
        return child_env()
    return child_env({THREADS_VAR: str(threads), "OPENREG_COMPUTE_THREADS": str(threads)})


def child_profile(name: str, workload: str, dev: str) -> dict:
    """Per-op calls and self CPU time (us) per step over PROFILE_STEPS steps after warm-up, split by
    thread: "host" is the calling thread and autograd's threads (each op's dispatch, and on openreg the
    enqueueing of its work item, or the wait of a sync), "device" every other thread (openreg's device
    threads run their kernels outside the profiler's view: this stays empty unless that changes)."""
    torch = load_openreg()
    from torch.profiler import ProfilerActivity, profile, record_function

    _set_threads(torch)
    step = make_step(torch, name, workload, dev)
    n = PROFILE_STEPS[workload]
    with torch.no_grad() if workload == "generate" else contextlib.nullcontext():
        for _ in range(3):
            step()
        _sync(torch, dev)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            t0 = time.perf_counter()
            for _ in range(n):
                with record_function(STEP_MARK):
                    step()
            _sync(torch, dev)
            wall = time.perf_counter() - t0
    events = prof.events()
    host = {e.thread for e in events if e.name == STEP_MARK or e.name.startswith("autograd::engine::evaluate")}
    ops: dict = {"host": {}, "device": {}}
    for e in events:
        if e.name == STEP_MARK:
            continue
        calls_us = ops["host" if e.thread in host else "device"].setdefault(e.name, [0.0, 0.0])
        calls_us[0] += 1 / n
        calls_us[1] += e.self_cpu_time_total / n
    return {"steps": n, "wall_ms": wall / n * 1e3, "ops": ops}


def print_profile(name: str, workload: str, top: int, threads: int | None) -> dict:
    """Runs child_profile on each device and prints the ops with the most self time on either."""
    res = {dev: run_child(__spec__.name, ["--child-profile", name, workload, dev], _env(threads))
           for dev in ("cpu", "openreg")}
    cpu, ore, dev_ops = res["cpu"]["ops"]["host"], res["openreg"]["ops"]["host"], res["openreg"]["ops"]["device"]
    none = [0.0, 0.0]
    print(f"{name}/{workload}, per step: wall under the profiler cpu {res['cpu']['wall_ms']:.2f} ms, "
          f"openreg {res['openreg']['wall_ms']:.2f} ms")
    for label, ops in (("cpu, calling thread", cpu), ("openreg, host threads", ore)):
        aten = [v for k, v in ops.items() if k.startswith("aten::")]
        print(f"  {label}: {sum(v[0] for v in aten):.0f} aten calls, self CPU {sum(v[1] for v in ops.values()) / 1e3:.2f} ms")
    keys = sorted(set(cpu) | set(ore), key=lambda k: -max(ore.get(k, none)[1], cpu.get(k, none)[1]))
    if dev_ops:
        print(f"  openreg, device threads: {len(dev_ops)} ops recorded")
    table = TablePrinter([("op", 50), ("cpu n", 6), ("cpu us", 8), ("or n", 6), ("or host us", 10)],
                         align="<>>>>", indent="  ")
    for k in keys[:top]:
        c, o = cpu.get(k, none), ore.get(k, none)
        table.row(k[:50], f"{c[0]:.0f}", f"{c[1]:.0f}", f"{o[0]:.0f}", f"{o[1]:.0f}")
    return res


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=3, metavar=("MODEL", "WORKLOAD", "DEVICE"), help=argparse.SUPPRESS)
    parser.add_argument("--child-profile", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--profile", nargs=2, metavar=("MODEL", "WORKLOAD"),
                        help="print per-op host time on both devices instead of timing")
    parser.add_argument("--top", type=int, default=30, help="ops --profile prints")
    parser.add_argument("--threads", type=int, help="a tuned configuration instead of the default: N intra-op "
                        "threads on CPU (torch.set_num_threads) and OPENREG_COMPUTE_THREADS=N")
    parser.add_argument("--only", nargs="*", choices=ROWS, help="rows to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="fewer steps and processes (still medians)")
    parser.add_argument("--out", default=os.path.join("bench", "results", "model_speed_bench.json"))
    args = parser.parse_args()
    if args.child:
        name, workload, dev = args.child
        print(json.dumps(child_measure(name, workload, dev, args.quick)))
        return 0
    if args.child_profile:
        name, workload, dev = args.child_profile
        print(json.dumps(child_profile(name, workload, dev)))
        return 0
    if args.profile:
        name, workload = args.profile
        print_profile(name, workload, args.top, args.threads)
        return 0
    reps = QUICK_REPS if args.quick else REPS
    load = os.getloadavg()
    print(f"{os.cpu_count()} cores, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
          f"{reps} processes per device per row")
    config = "default" if args.threads is None else f"{args.threads} thread(s) per device (tuned)"
    print(f"configuration: {config}")
    results: dict = {"cores": os.cpu_count(), "reps": reps, "configuration": config, "target": f"<= {TARGET}",
                     "load_before": load, "rows": {}}
    table = TablePrinter([("row", 16), ("cpu ms", 9), ("openreg ms", 11), ("ratio", 7), ("target", 7),
                          ("best ratio", 10), ("CPU-time ratio", 14)], align="<>>>>>>")
    for row in args.only or ROWS:
        name, workload = row.split("/")
        runs: dict = {"cpu": [], "openreg": []}
        error = None
        try:
            for _ in range(reps):
                for dev in runs:
                    runs[dev].append(run_child(__spec__.name, ["--child", name, workload, dev], _env(args.threads),
                                                   args.quick))
        except ChildFailed as e:
            error = e.last_error_line()
        if error:
            results["rows"][row] = {"error": error}
            table.row(row, "-", "-", "-", f"<= {TARGET}", "-", "-")
            print("  " + error)
            continue
        med = {dev: statistics.median(r["ms"] for r in rs) for dev, rs in runs.items()}
        proc = {dev: statistics.median(r["process_cpu_ms"] for r in rs) for dev, rs in runs.items()}
        best = {dev: min(min(r["chunks_ms"]) for r in rs) for dev, rs in runs.items()}
        ratio = med["openreg"] / med["cpu"]
        results["rows"][row] = {"cpu_ms": med["cpu"], "openreg_ms": med["openreg"], "ratio": ratio,
                                "best_ms": best, "best_ratio": best["openreg"] / best["cpu"],
                                "process_cpu_ms": proc, "cpu_time_ratio": proc["openreg"] / proc["cpu"],
                                "processes": runs}
        table.row(row, f"{med['cpu']:.2f}", f"{med['openreg']:.2f}", f"{ratio:.2f}", f"<= {TARGET}",
                  f"{best['openreg'] / best['cpu']:.2f}", f"{proc['openreg'] / proc['cpu']:.2f}")
    results["load_after"] = os.getloadavg()
    print(f"load average after: {results['load_after'][0]:.2f}")
    write_results(results, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
