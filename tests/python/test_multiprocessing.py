"""openreg tensors cross torch.multiprocessing queues: as copies through CPU shared memory, rebuilt on
the device of the same index in the receiver (CUDA shares the memory instead; see docs)."""

import pickle
from multiprocessing.reduction import ForkingPickler

import pytest
import torch
import torch.multiprocessing as mp


def _roundtrip(obj):
    return pickle.loads(ForkingPickler.dumps(obj))


def test_tensor_is_rebuilt_on_the_same_device_with_the_same_values():
    x = torch.arange(12.0, device="openreg:1").view(3, 4).t()  # a non-contiguous view
    y = _roundtrip(x)
    assert y.device == torch.device("openreg:1")
    assert torch.equal(y.cpu(), x.cpu())
    y.add_(1)  # a copy: the sender's tensor is unchanged
    assert torch.equal(x.cpu(), torch.arange(12.0).view(3, 4).t())


def test_parameters_and_requires_grad_survive():
    p = torch.nn.Parameter(torch.ones(3, device="openreg"))
    q = _roundtrip(p)
    assert isinstance(q, torch.nn.Parameter) and q.requires_grad and q.is_leaf
    assert q.device == torch.device("openreg:0")
    leaf = torch.ones(2, device="openreg", requires_grad=True)
    assert _roundtrip(leaf).requires_grad


def test_non_leaf_requiring_grad_is_refused_like_cpu():
    x = torch.ones(2, device="openreg", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="non-leaf tensor which requires_grad"):
        ForkingPickler.dumps(x)


def test_storage_is_rebuilt_on_its_device():
    t = torch.arange(4, dtype=torch.int32, device="openreg:1")
    s = _roundtrip(t.untyped_storage())
    assert s.device == torch.device("openreg:1")
    assert torch.equal(torch.tensor([], dtype=torch.int32).set_(s.cpu()), torch.arange(4, dtype=torch.int32))


def test_cpu_tensors_still_use_torchs_shared_memory():
    x = torch.ones(3)
    y = _roundtrip(x)
    assert y.is_shared() and torch.equal(x, y)


def _child(queue, out):
    t = queue.get(timeout=60)
    out.put((str(t.device), (t * 2).cpu().tolist()))


def test_tensor_through_a_queue_to_a_spawned_process():
    ctx = mp.get_context("spawn")
    queue, out = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=_child, args=(queue, out))
    proc.start()
    try:
        queue.put(torch.arange(4.0, device="openreg:1"))
        assert out.get(timeout=120) == ("openreg:1", [0.0, 2.0, 4.0, 6.0])
    finally:
        proc.join(timeout=60)
        if proc.is_alive():
            proc.kill()
    assert proc.exitcode == 0
