"""Fork safety: a child forked after the parent started openreg gets a clear error, never a hang (its
device threads did not survive the fork); a child forked before that can use openreg."""

import ast

FORK_SCRIPT = """
import multiprocessing as mp
import torch

def child(queue):
    report = {"is_initialized": torch.openreg.is_initialized()}
    torch.manual_seed(1)  # skips openreg in a bad fork instead of failing
    report["cpu_ok"] = torch.ones(2).sum().item() == 2.0
    try:
        report["value"] = torch.full((2,), 5.0, device="openreg").cpu().sum().item()
    except RuntimeError as err:
        report["error"] = str(err)
    try:
        torch.openreg.init()
    except RuntimeError as err:
        report["init_error"] = str(err)
    queue.put(report)

def fork_and_report(label):
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=child, args=(queue,))
    proc.start()
    report = queue.get(timeout=60)
    proc.join(timeout=60)
    assert proc.exitcode == 0, proc.exitcode
    print(label, report)

if __name__ == "__main__":
    fork_and_report("BEFORE_INIT")  # the parent has not started openreg yet
    assert torch.full((3,), 2.0, device="openreg:1").cpu().sum().item() == 6.0
    fork_and_report("AFTER_INIT")
    # the parent is unaffected by its children
    assert torch.full((3,), 2.0, device="openreg:1").cpu().sum().item() == 6.0
    print("PARENT_OK")
"""


def _report(stdout, label):
    line = next(line for line in stdout.splitlines() if line.startswith(label + " "))
    return ast.literal_eval(line[len(label) + 1 :])


def test_fork_before_and_after_init(run_python, check_ok):
    proc = run_python(FORK_SCRIPT)
    check_ok(proc)
    assert "PARENT_OK" in proc.stdout

    before = _report(proc.stdout, "BEFORE_INIT")
    assert before["value"] == 10.0
    assert "error" not in before and "init_error" not in before

    after = _report(proc.stdout, "AFTER_INIT")
    assert after["is_initialized"] is False
    assert after["cpu_ok"] is True
    assert "value" not in after
    assert "Cannot re-initialize openreg in forked subprocess" in after["error"]
    assert "Cannot re-initialize openreg in forked subprocess" in after["init_error"]
