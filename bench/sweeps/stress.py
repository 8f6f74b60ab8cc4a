"""Concurrency stress run: many Python threads, each with its own streams on every device, issuing
random mixes of ops, cross-stream event waits, cross-device copies, allocations and frees; every result
is checked against a CPU reference.

    python -m bench.sweeps.stress --seconds 60 --threads 4          # the long run
    python -m bench.sweeps.stress --ops 400 --threads 3              # the short run `make test` does

Fails (exit 1) on any wrong or lost result, on device memory that does not return to its starting
level, and (exit 2, from a watchdog) on a hang: no thread making progress for --hang-seconds.

Every op's result is checked: a slot (the result of an op, or a tensor an op changed in place) is
compared with its CPU reference before it is dropped, and every slot alive at the end is too. The
comparison reads the device value back without stalling the worker: a non-blocking copy into pinned
memory on one of the worker's streams, ordered after the slot's last use, checked once its event
completed. NaNs in the same places on both sides (a long chain of matmuls overflows on both) are equal.

`--sanitizer` runs under the stream race checker (torch.openreg.sanitizer, report mode): a race in the
tool's own ordering discipline fails the run. `--fuzz-seed S` runs under schedule fuzzing
(OPENREG_SCHEDULE_FUZZ=S: random per-seed delays of every stream's work), and `--seeds N` sweeps seeds
S..S+N-1, one process each: the run fails if any seed fails.

`--inject-faults N` checks the checker: N times at random, it changes one element of a fresh result on
the device and not in the reference. The run then passes only if every injected fault was caught.

Ordering discipline (what a correct user program does, and what is being checked): every slot (a device
tensor and its CPU reference) carries the event recorded after its last use; any stream that uses the
slot first waits on that event, then records a new one. So every use of a slot is ordered after the
previous one, whatever streams and devices they ran on. Frees are not ordered: a slot is dropped while
other streams may still use it, so every use on a stream calls Tensor.record_stream(stream), as CUDA's
caching allocator requires (a freed block is otherwise reused at once by its allocation stream). The
`free_in_use` op makes that race likely: it frees a tensor a busy side stream is about to read, then
overwrites fresh memory on the tensor's allocation stream.
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import random
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import List, Optional

import torch


@dataclass
class Slot:
    dev: torch.Tensor          # the value on an openreg device
    ref: torch.Tensor          # the same value computed on the CPU
    event: Optional[torch.Event] = None  # recorded after the last use of `dev`
    injected: bool = False     # a fault was injected into `dev` (--inject-faults)
    fault: int = -1            # which one (a slot may be checked more than once)
    tainted: bool = False      # computed from an injected or tainted slot: its mismatch proves nothing


@dataclass
class Stats:
    ops: int = 0
    checks: int = 0
    mismatches: List[str] = field(default_factory=list)
    injected: int = 0        # faults injected (--inject-faults)
    caught: set = field(default_factory=set)  # of those, the ones whose slot failed a check


@dataclass
class PendingCheck:
    host: torch.Tensor       # pinned; filled by a non-blocking copy
    ref: torch.Tensor
    done: torch.Event        # recorded after the copy
    where: str
    fault: int               # the slot's injected fault, or -1
    tainted: bool


class Worker(threading.Thread):
    def __init__(self, index: int, args, deadline: float, stats: Stats, progress: List[float]):
        super().__init__(name=f"stress-{index}", daemon=True)
        self.index, self.args, self.deadline, self.stats, self.progress = index, args, deadline, stats, progress
        self.rng = random.Random(args.seed * 1000 + index)
        self.devices = [torch.device("openreg", d) for d in range(torch.openreg.device_count())]
        self.streams = {d.index: [torch.openreg.Stream(d) for _ in range(args.streams)] for d in self.devices}
        self.slots: List[Slot] = []
        self.pending: List[PendingCheck] = []
        self.faults_left = args.inject_faults
        self.error: Optional[BaseException] = None

    # -- ordering helpers -------------------------------------------------------------------------
    def _use(self, stream, *slots: Slot) -> None:
        for s in slots:
            if s.event is not None:
                stream.wait_event(s.event)
            # The slot may be freed while `stream` still uses it (Note [Stream-ordered device memory]).
            s.dev.record_stream(stream)

    def _done(self, stream, *slots: Slot) -> None:
        """Records the end of an op that used `slots` (its inputs and outputs)."""
        event = torch.Event(device=stream.device)
        event.record(stream)
        tainted = any(s.injected or s.tainted for s in slots)
        for s in slots:
            s.event = event
            s.tainted = s.tainted or (tainted and not s.injected)

    def _pick_stream(self, device_index: int):
        return self.rng.choice(self.streams[device_index])

    def _derive(self, stream, fn, *inputs: Slot) -> None:
        """Adds the slot fn(*inputs): on the device on `stream`, after the inputs are ready, and on the
        CPU references, so that the check compares the same computation on both sides. The caller has
        drawn its random choices already: the draws stay in the order a seed reproduces."""
        with torch.openreg.stream(stream):
            self._use(stream, *inputs)
            out = Slot(fn(*(s.dev for s in inputs)), fn(*(s.ref for s in inputs)))
        self._done(stream, *inputs, out)
        self.slots.append(out)

    def _new_values(self, shape):
        gen = torch.Generator().manual_seed(self.rng.randrange(1 << 30))
        return torch.randn(shape, generator=gen)

    # -- operations -------------------------------------------------------------------------------
    def op_create(self) -> None:
        dev = self.rng.choice(self.devices)
        shape = (self.rng.choice([1, 7, 64, 257]), self.rng.choice([1, 16, 33]))
        ref = self._new_values(shape)
        stream = self._pick_stream(dev.index)
        with torch.openreg.stream(stream):
            t = ref.to(dev)
        slot = Slot(t, ref)
        self._done(stream, slot)
        self.slots.append(slot)

    def op_unary(self) -> None:
        a = self.rng.choice(self.slots)
        stream = self._pick_stream(a.dev.device.index)
        # log: NaN for negative inputs, on both sides (the check treats NaNs in the same places as equal)
        fn = self.rng.choice([torch.tanh, torch.sigmoid, lambda x: x * 0.5 + 1.0, torch.neg, torch.log])
        self._derive(stream, fn, a)

    def op_binary(self) -> None:
        a = self.rng.choice(self.slots)
        peers = [s for s in self.slots if s.dev.device == a.dev.device and s.ref.shape == a.ref.shape]
        b = self.rng.choice(peers)
        stream = self._pick_stream(a.dev.device.index)
        fn = self.rng.choice([torch.add, torch.mul, torch.sub, torch.maximum])
        self._derive(stream, fn, a, b)

    def op_inplace(self) -> None:
        a = self.rng.choice(self.slots)
        stream = self._pick_stream(a.dev.device.index)
        with torch.openreg.stream(stream):
            self._use(stream, a)
            a.dev.mul_(0.75).add_(0.25)
        a.ref.mul_(0.75).add_(0.25)
        self._done(stream, a)

    def op_matmul(self) -> None:
        a = self.rng.choice(self.slots)
        stream = self._pick_stream(a.dev.device.index)
        self._derive(stream, lambda x: x.t() @ x, a)

    def op_reduce(self) -> None:
        a = self.rng.choice(self.slots)
        stream = self._pick_stream(a.dev.device.index)
        self._derive(stream, lambda x: x.sum(dim=0, keepdim=True), a)

    def op_cross_device(self) -> None:
        if len(self.devices) < 2:
            return self.op_unary()
        a = self.rng.choice(self.slots)
        src = a.dev.device.index
        dst = self.rng.choice([d for d in self.devices if d.index != src])
        s_src, s_dst = self._pick_stream(src), self._pick_stream(dst.index)
        with torch.openreg.stream(s_src), torch.openreg.stream(s_dst):
            self._use(s_src, a)
            out = Slot(a.dev.to(dst, non_blocking=self.rng.random() < 0.5), a.ref.clone())
            # The copy is ordered on both devices' current streams; later users of either side wait
            # on events recorded after it.
            self._done(s_src, a)
            self._done(s_dst, out)
            out.tainted = a.injected or a.tainted
        self.slots.append(out)

    def op_free_in_use(self) -> None:
        """Frees a tensor while a busy side stream still has to read it, then overwrites new memory on
        the tensor's allocation stream: with record_stream the side stream still reads the old values."""
        dev = self.rng.choice(self.devices)
        if len(self.streams[dev.index]) < 2:
            return self.op_unary()
        owner, user = self.rng.sample(self.streams[dev.index], 2)
        shape = (self.rng.choice([7, 64, 257]), 16)
        ref = self._new_values(shape)
        with torch.openreg.stream(owner):
            t = ref.to(dev)  # t's block belongs to `owner`
            ready = torch.Event(device=dev)
            ready.record(owner)
        user.wait_event(ready)
        with torch.openreg.stream(user):
            busy = torch.ones(256, 256, device=dev)
            for _ in range(4):
                busy = busy @ busy / 256  # the user stream reads t only after this (exact: all ones)
            out = Slot(t * 2.0 + busy[0, 0], ref * 2.0 + 1.0)
        t.record_stream(user)
        del t
        with torch.openreg.stream(owner):
            clobber = torch.full(shape, float("nan"), device=dev)  # would take t's block without the record
        self._done(user, out)
        self.slots.append(out)
        del clobber

    def op_free(self) -> None:
        if len(self.slots) > 2:
            self._check_later(self.slots.pop(self.rng.randrange(len(self.slots))))

    def op_check(self, slot: Optional[Slot] = None) -> None:
        """A blocking check, as a program's `.cpu()` is: synchronizes the stream it reads on."""
        a = slot if slot is not None else self.rng.choice(self.slots)
        stream = self._pick_stream(a.dev.device.index)
        with torch.openreg.stream(stream):
            self._use(stream, a)
            got = a.dev.cpu()  # synchronizes the current stream
        self._done(stream, a)
        self._compare(got, a.ref, f"{tuple(a.ref.shape)} on {a.dev.device}", a.fault, a.tainted)

    def _check_later(self, a: Slot) -> None:
        """Queues a non-blocking read-back of a slot that is being dropped; verified by _verify_done."""
        stream = self._pick_stream(a.dev.device.index)
        host = torch.empty(a.dev.shape, dtype=a.dev.dtype, pin_memory=True)
        with torch.openreg.stream(stream):
            self._use(stream, a)
            host.copy_(a.dev, non_blocking=True)
        done = torch.Event(device=stream.device)
        done.record(stream)
        self.pending.append(
            PendingCheck(host, a.ref, done, f"{tuple(a.ref.shape)} on {a.dev.device}", a.fault, a.tainted))
        if len(self.pending) > 32:
            self._verify_done(wait=False)

    def _verify_done(self, wait: bool) -> None:
        still = []
        for p in self.pending:
            if wait:
                p.done.synchronize()
            elif not p.done.query():
                still.append(p)
                continue
            self._compare(p.host, p.ref, p.where, p.fault, p.tainted)
        self.pending = still

    def _compare(self, got: torch.Tensor, ref: torch.Tensor, where: str, fault: int, tainted: bool) -> None:
        self.stats.checks += 1
        same = torch.allclose(got, ref, rtol=1e-4, atol=1e-4, equal_nan=True)
        if fault >= 0:
            if not same:
                self.stats.caught.add(fault)
            else:
                self.stats.mismatches.append(f"thread {self.index}: {where}: an injected fault was not caught")
            return
        if same or tainted:
            return
        diff = (got - ref).abs()
        self.stats.mismatches.append(
            f"thread {self.index}: {where}: max error {diff[~diff.isnan()].max().item() if (~diff.isnan()).any() else float('nan'):.3g}")

    def _maybe_inject(self, slot: Slot) -> None:
        """--inject-faults: changes one element of a fresh result on the device only."""
        if self.faults_left <= 0 or self.rng.random() > 0.05 or not bool(slot.ref.isfinite().all()):
            return
        self.faults_left -= 1
        slot.injected, slot.fault = True, self.stats.injected
        self.stats.injected += 1
        stream = self._pick_stream(slot.dev.device.index)
        with torch.openreg.stream(stream):
            self._use(stream, slot)
            slot.dev.view(-1)[0] = float(slot.ref.view(-1)[0]) + 1.0
        self._done(stream, slot)

    def run(self) -> None:
        ops = [(self.op_create, 3), (self.op_unary, 4), (self.op_binary, 4), (self.op_inplace, 2),
               (self.op_matmul, 1), (self.op_reduce, 1), (self.op_cross_device, 3), (self.op_free, 3), (self.op_free_in_use, 2),
               (self.op_check, 1)]
        choices, weights = zip(*ops)
        try:
            for _ in range(2):
                self.op_create()
            done = 0
            while done < self.args.ops and time.monotonic() < self.deadline:
                if len(self.slots) > self.args.max_slots:
                    self.op_free()
                before = len(self.slots)
                self.rng.choices(choices, weights)[0]()
                if len(self.slots) > before:
                    self._maybe_inject(self.slots[-1])
                done += 1
                self.stats.ops += 1
                self.progress[self.index] = time.monotonic()
            for slot in self.slots:  # every value still alive is checked at the end
                self.op_check(slot)
            self.slots.clear()
            self._verify_done(wait=True)
        except BaseException as e:  # reported by the main thread
            self.error = e


def _without(argv: List[str], flags) -> List[str]:
    """argv without the given flags (and their values)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in flags:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def sweep(args, argv: List[str]) -> int:
    """Runs the tool once per fuzz seed, each in its own process: the runtime reads OPENREG_SCHEDULE_FUZZ
    once, when it starts."""
    import subprocess

    first = args.fuzz_seed if args.fuzz_seed is not None else 0
    base = _without(argv, {"--fuzz-seed", "--seeds"})
    failed = []
    for seed in range(first, first + args.seeds):
        env = dict(os.environ, OPENREG_SCHEDULE_FUZZ=str(seed))
        print(f"stress: fuzz seed {seed}", flush=True)
        rc = subprocess.call([sys.executable, "-m", __spec__.name, *base, "--fuzz-seed", str(seed)], env=env)
        if rc != 0:
            failed.append(seed)
    print(f"stress: {args.seeds - len(failed)} of {args.seeds} seeds passed"
          + (f"; failed seeds: {failed}" if failed else ""))
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="openreg concurrency stress run")
    parser.add_argument("--threads", type=int, default=4, help="Python threads issuing work")
    parser.add_argument("--streams", type=int, default=3, help="streams per thread per device")
    parser.add_argument("--ops", type=int, default=10**9, help="operations per thread (bound)")
    parser.add_argument("--seconds", type=float, default=30.0, help="wall-time bound")
    parser.add_argument("--max-slots", type=int, default=24, help="live tensors per thread")
    parser.add_argument("--hang-seconds", type=float, default=60.0, help="watchdog: no progress for this long")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--inject-faults", type=int, default=0,
                        help="per thread: change this many device results behind the checker's back; "
                             "the run passes only if it catches every one")
    parser.add_argument("--sanitizer", action="store_true",
                        help="check every op for stream races (torch.openreg.sanitizer, report mode)")
    parser.add_argument("--fuzz-seed", type=int, default=None,
                        help="schedule fuzzing with this seed (OPENREG_SCHEDULE_FUZZ)")
    parser.add_argument("--seeds", type=int, default=1,
                        help="with --fuzz-seed S: run seeds S..S+N-1, one process each")
    args = parser.parse_args(argv)
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.fuzz_seed is not None and os.environ.get("OPENREG_SCHEDULE_FUZZ") != str(args.fuzz_seed) or args.seeds > 1:
        return sweep(args, argv if argv is not None else sys.argv[1:])
    if args.sanitizer:
        torch.openreg.sanitizer.enable(report=True)  # before the first use of the device

    torch.openreg.init()
    devices = range(torch.openreg.device_count())
    torch.openreg.synchronize()
    start_mem = {d: torch.openreg.memory_allocated(d) for d in devices}
    stats_list = [Stats() for _ in range(args.threads)]
    progress = [time.monotonic()] * args.threads
    deadline = time.monotonic() + args.seconds
    workers = [Worker(i, args, deadline, stats_list[i], progress) for i in range(args.threads)]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        time.sleep(0.2)
        stalled = [w.index for w in workers if w.is_alive() and time.monotonic() - progress[w.index] > args.hang_seconds]
        if stalled:
            print(f"stress: HANG: threads {stalled} made no progress for {args.hang_seconds} s; stacks:", flush=True)
            faulthandler.dump_traceback(all_threads=True)
            os._exit(2)
    elapsed = time.monotonic() - t0
    for d in devices:
        torch.openreg.synchronize(d)
    errors = [f"thread {w.index}: {type(w.error).__name__}: {w.error}" for w in workers if w.error is not None]
    mismatches = [m for s in stats_list for m in s.mismatches]
    del workers
    import gc

    gc.collect()
    leaked = {d: torch.openreg.memory_allocated(d) - start_mem[d] for d in devices}
    ops = sum(s.ops for s in stats_list)
    checks = sum(s.checks for s in stats_list)
    injected = sum(s.injected for s in stats_list)
    caught = sum(len(s.caught) for s in stats_list)
    print(f"stress: {args.threads} threads x {args.streams} streams x {len(devices)} devices: "
          f"{ops} ops, {checks} checks in {elapsed:.1f} s ({ops / max(elapsed, 1e-9):.0f} ops/s)")
    print(f"stress: mismatches {len(mismatches)}, errors {len(errors)}, "
          f"memory not returned {sum(leaked.values())} bytes")
    if args.inject_faults:
        print(f"stress: injected faults caught {caught} of {injected}")
    for line in (mismatches + errors)[:20]:
        print("  " + line)
    ok = not mismatches and not errors and not any(leaked.values()) and ops > 0 and caught == injected
    if args.inject_faults and injected == 0:
        ok = False  # asked to check the checker, but nothing was injected
        print("stress: no fault was injected (run longer)")
    print("stress: PASS" if ok else "stress: FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
