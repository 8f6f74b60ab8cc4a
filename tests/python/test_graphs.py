"""Graph capture and replay (torch.accelerator.Graph, torch.openreg.OpenRegGraph), CUDA's capture rules,
private memory pools and MemPool (Note [Graphs on openreg] in backend/registration/Graph.cpp)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading

import pytest
import torch

DEV = "openreg"


def capture(fn, **kwargs):
    g = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(g, **kwargs):
        out = fn()
    return g, out


def test_replay_reads_the_inputs_at_replay_and_writes_the_captured_outputs():
    x = torch.zeros(4, device=DEV)
    counter = torch.zeros(4, device=DEV)

    def work():
        counter.add_(1)
        return x * 2 + 1

    g, y = capture(work)
    assert torch.equal(counter.cpu(), torch.zeros(4)), "capture must not run the work"
    x.fill_(3)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((4,), 7.0))
    x.fill_(5)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((4,), 11.0))
    assert torch.equal(counter.cpu(), torch.full((4,), 2.0))


def test_torch_accelerator_graph_on_a_side_stream():
    x = torch.zeros(3, device=DEV)
    g = torch.accelerator.Graph()
    with torch.Stream(device=DEV), g:
        x += 1
    assert torch.equal(x.cpu(), torch.zeros(3))
    g.replay()
    g.replay()
    assert torch.equal(x.cpu(), torch.full((3,), 2.0))
    assert g.pool() != (0, 0)


def _train_steps(graphed: bool, steps: int = 5):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(16, 1)
    ).to(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = [(torch.randn(4, 8), torch.randn(4, 1)) for _ in range(steps)]
    losses = []
    if not graphed:
        torch.openreg.manual_seed(1)
        for x, y in data:
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x.to(DEV)), y.to(DEV))
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, [p.detach().cpu() for p in model.parameters()]
    sx, sy = torch.zeros(4, 8, device=DEV), torch.zeros(4, 1, device=DEV)
    # The momentum buffers are made by the first step: one eager step on zero data (zero gradients, so
    # the weights do not move), as CUDA's whole-network capture recipe warms up before capturing.
    side = torch.openreg.Stream()
    side.wait_stream(torch.openreg.current_stream())
    with torch.openreg.stream(side):
        opt.zero_grad(set_to_none=True)
        (model(sx).sum() * 0).backward()
        opt.step()
    torch.openreg.current_stream().wait_stream(side)
    opt.zero_grad(set_to_none=True)
    g = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(g):
        static_loss = torch.nn.functional.mse_loss(model(sx), sy)
        static_loss.backward()
        opt.step()
    torch.openreg.manual_seed(1)
    for x, y in data:
        sx.copy_(x)
        sy.copy_(y)
        g.replay()
        losses.append(static_loss.item())
    return losses, [p.detach().cpu() for p in model.parameters()]


def test_captured_training_step_equals_eager_with_dropout():
    eager_losses, eager_params = _train_steps(graphed=False)
    graph_losses, graph_params = _train_steps(graphed=True)
    assert graph_losses == eager_losses
    for a, b in zip(eager_params, graph_params):
        assert torch.equal(a, b)


def test_random_ops_draw_new_numbers_per_replay_and_the_seed_reproduces_them():
    g, r = capture(lambda: torch.rand(64, device=DEV))
    torch.openreg.manual_seed(123)
    g.replay()
    first = r.cpu().clone()
    g.replay()
    second = r.cpu().clone()
    assert not torch.equal(first, second)
    torch.openreg.manual_seed(123)
    g.replay()
    assert torch.equal(r.cpu(), first)
    g.replay()
    assert torch.equal(r.cpu(), second)


def test_capture_consumes_no_generator_offsets():
    torch.openreg.manual_seed(7)
    expected = torch.rand(8, device=DEV).cpu()
    torch.openreg.manual_seed(7)
    capture(lambda: torch.rand(8, device=DEV))
    assert torch.equal(torch.rand(8, device=DEV).cpu(), expected)


# Operations CUDA refuses during capture, whatever the capture mode: each needs captured work done.
_x = None


def _stream_sync():
    torch.openreg.current_stream().synchronize()


def _stream_query():
    torch.openreg.current_stream().query()


def _item():
    _x.sum().item()


def _to_cpu():
    _x.cpu()


def _pageable_copy():
    _x.copy_(torch.ones(4))


def _event_sync():
    e = torch.openreg.Event()
    e.record()
    e.synchronize()


def _event_query():
    e = torch.openreg.Event()
    e.record()
    e.query()


ALWAYS_ILLEGAL = {
    "stream_sync": (_stream_sync, "operation not permitted when stream is capturing"),
    "stream_query": (_stream_query, "operation not permitted when stream is capturing"),
    "item": (_item, "operation not permitted when stream is capturing"),
    "cpu": (_to_cpu, "operation not permitted when stream is capturing"),
    "pageable_copy": (_pageable_copy, "operation not permitted when stream is capturing"),
    "event_sync": (_event_sync, "operation not permitted on an event last recorded in a capturing stream"),
    "event_query": (_event_query, "operation not permitted on an event last recorded in a capturing stream"),
}


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
@pytest.mark.parametrize("what", sorted(ALWAYS_ILLEGAL))
def test_illegal_operation_raises_at_the_call_and_invalidates_the_capture(mode, what):
    global _x
    _x = torch.zeros(4, device=DEV)
    fn, message = ALWAYS_ILLEGAL[what]
    g = torch.openreg.OpenRegGraph()
    with pytest.raises(torch.AcceleratorError, match=message):
        with torch.openreg.graph(g, capture_error_mode=mode):
            _x.add_(1)
            fn()
    assert not torch.openreg.is_current_stream_capturing()
    # The capture was ended and invalidated: the graph has nothing to replay, and the process goes on.
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        g.replay()
    assert torch.equal(_x.cpu(), torch.zeros(4))


def test_invalidated_capture_refuses_further_work_and_capture_end_says_so():
    x = torch.zeros(4, device=DEV)
    g = torch.openreg.OpenRegGraph()
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        g.capture_begin()
        with pytest.raises(torch.AcceleratorError, match="not permitted when stream is capturing"):
            s.synchronize()
        with pytest.raises(torch.AcceleratorError, match="operation failed due to a previous error during capture"):
            x.add_(1)
        with pytest.raises(torch.AcceleratorError, match="cudaErrorStreamCaptureInvalidated"):
            g.capture_end()
    assert not torch.openreg.is_current_stream_capturing()
    torch.openreg.synchronize()


@pytest.mark.parametrize("mode,refused", [("global", True), ("thread_local", True), ("relaxed", False)])
def test_device_synchronize_follows_the_capture_mode(mode, refused):
    x = torch.zeros(4, device=DEV)
    g = torch.openreg.OpenRegGraph()
    if refused:
        with pytest.raises(torch.AcceleratorError, match="capture_error_mode"):
            with torch.openreg.graph(g, capture_error_mode=mode):
                x.add_(1)
                torch.openreg.synchronize()
    else:
        with torch.openreg.graph(g, capture_error_mode=mode):
            x.add_(1)
            torch.openreg.synchronize()
        g.replay()
        assert torch.equal(x.cpu(), torch.ones(4))


@pytest.mark.parametrize("mode,refused", [("global", True), ("thread_local", False), ("relaxed", False)])
def test_device_synchronize_on_another_thread_follows_the_capture_mode(mode, refused):
    x = torch.zeros(4, device=DEV)
    errors = []

    def other():
        try:
            torch.openreg.synchronize()
        except torch.AcceleratorError as e:
            errors.append(e)

    g = torch.openreg.OpenRegGraph()
    try:
        with torch.openreg.graph(g, capture_error_mode=mode):
            x.add_(1)
            t = threading.Thread(target=other)
            t.start()
            t.join()
    except torch.AcceleratorError:
        assert refused  # the global capture was invalidated by the other thread's call
    assert bool(errors) == refused


def test_unjoined_side_stream_fails_capture_end():
    x = torch.zeros(4, device=DEV)
    side = torch.openreg.Stream()
    g = torch.openreg.OpenRegGraph()
    with pytest.raises(torch.AcceleratorError, match="capture sequence contains a fork that was not joined"):
        with torch.openreg.graph(g):
            side.wait_stream(torch.openreg.current_stream())
            with torch.openreg.stream(side):
                x.mul_(3)
    # The forked stream captures no longer.
    with torch.openreg.stream(side):
        assert not torch.openreg.is_current_stream_capturing()
        x.add_(1)
    side.synchronize()
    assert torch.equal(x.cpu(), torch.ones(4))


def test_waiting_on_work_outside_the_capture_is_an_isolation_error():
    other = torch.openreg.Stream()
    e = torch.openreg.Event()
    with torch.openreg.stream(other):
        torch.ones(4, device=DEV)
        e.record()
    g = torch.openreg.OpenRegGraph()
    with pytest.raises(torch.AcceleratorError, match="uncaptured work"):
        with torch.openreg.graph(g):
            torch.openreg.current_stream().wait_event(e)


def test_fork_and_join_of_two_side_streams():
    inp = torch.ones(1024, device=DEV)
    s1, s2 = torch.openreg.Stream(), torch.openreg.Stream()
    g = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(g):
        main = torch.openreg.current_stream()
        s1.wait_stream(main)
        s2.wait_stream(main)
        with torch.openreg.stream(s1):
            a = inp * 2
        with torch.openreg.stream(s2):
            b = inp * 3
        main.wait_stream(s1)
        main.wait_stream(s2)
        out = a + b
    for value in (2.0, 5.0):
        inp.fill_(value)
        g.replay()
        assert torch.equal(out.cpu(), torch.full((1024,), 5 * value))


def test_replay_on_another_stream_is_ordered_with_that_stream():
    x = torch.zeros(1 << 16, device=DEV)
    g, y = capture(lambda: x + 1)
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        x.fill_(41)
        g.replay()
        z = y * 1
    torch.openreg.current_stream().wait_stream(s)
    assert torch.equal(z.cpu(), torch.full((1 << 16,), 42.0))


def test_capture_refuses_the_default_stream():
    g = torch.openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        g.capture_begin()


def _segments_of(pool):
    return [s for s in torch.openreg.memory_snapshot() if tuple(s["segment_pool_id"]) == tuple(pool)]


def test_two_graphs_share_a_pool_and_its_memory_stays_private_until_reset():
    a = torch.ones(1000, device=DEV)
    g1, b = capture(lambda: a * 2)
    freed_addresses = []

    def second(b):
        tmp = b * 10  # freed during the capture: its block stays in the graphs' pool
        freed_addresses.append(tmp.data_ptr())
        del tmp
        return b + 1

    g2 = torch.openreg.OpenRegGraph()
    with torch.openreg.graph(g2, pool=g1.pool()):
        c = second(b)
    assert g2.pool() == g1.pool()
    assert {s["segment_pool_id"] for s in _segments_of(g1.pool())} == {tuple(g1.pool())}
    # Eager allocations of the freed block's size never get its address while the graphs live.
    eager = [torch.empty(1000, device=DEV) for _ in range(4)]
    assert freed_addresses[0] not in {t.data_ptr() for t in eager}
    a.fill_(5)
    g1.replay()
    g2.replay()
    assert torch.equal(c.cpu(), torch.full((1000,), 11.0))
    del b, c
    pool = g1.pool()
    g1.reset()
    torch.openreg.empty_cache()
    assert _segments_of(pool), "g2 still uses the pool"
    g2.reset()
    torch.openreg.empty_cache()
    assert not _segments_of(pool)


def test_graph_pool_handle_shares_a_pool():
    pool = torch.openreg.graph_pool_handle()
    x = torch.ones(8, device=DEV)
    g, y = capture(lambda: x + 1, pool=pool)
    assert g.pool() == pool
    assert _segments_of(pool)


def test_make_graphed_callables_forward_and_backward_match_eager():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to(DEV)
    ref = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2)).to(DEV)
    ref.load_state_dict(model.state_dict())
    sample = torch.randn(4, 8, device=DEV, requires_grad=True)
    graphed = torch.openreg.make_graphed_callables(model, (sample,))
    for _ in range(3):
        model.zero_grad(set_to_none=True)
        ref.zero_grad(set_to_none=True)
        inp = torch.randn(4, 8, device=DEV, requires_grad=True)
        inp_ref = inp.detach().clone().requires_grad_(True)
        out = graphed(inp)
        out.square().sum().backward()
        out_ref = ref(inp_ref)
        out_ref.square().sum().backward()
        torch.testing.assert_close(out, out_ref)
        torch.testing.assert_close(inp.grad, inp_ref.grad)
        for p, q in zip(model.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    model.eval()  # graphed in training mode: eval runs the module's own forward
    with torch.no_grad():
        torch.testing.assert_close(model(sample), ref(sample))


def test_error_in_a_replay_names_the_op_and_the_graph():
    idx = torch.tensor([0, 1], device=DEV)
    src = torch.ones(3, device=DEV)
    g, _ = capture(lambda: src[idx])
    idx.fill_(7)
    g.replay()
    with pytest.raises(RuntimeError, match=r"aten::index\.Tensor \[graph \d+\].*out of bounds"):
        torch.openreg.synchronize()
    torch.openreg.synchronize()  # reported once; the device goes on


def test_keep_graph_instantiate_and_debug_dump(tmp_path):
    x = torch.zeros(2, device=DEV)
    g = torch.openreg.OpenRegGraph(keep_graph=True)
    g.enable_debug_mode()
    with torch.openreg.graph(g):
        y = x + 1
    g.instantiate()
    g.replay()
    assert torch.equal(y.cpu(), torch.ones(2))
    path = tmp_path / "g.dot"
    g.debug_dump(str(path))
    text = path.read_text()
    assert text.startswith("digraph") and "aten::add" in text


def test_mem_pool_routes_a_threads_allocations_and_releases_at_the_end():
    pool = torch.openreg.MemPool()
    assert pool.use_count() == 1
    with torch.openreg.use_mem_pool(pool):
        assert pool.use_count() == 2
        t = torch.empty(1 << 18, device=DEV)
    outside = torch.empty(1 << 18, device=DEV)
    assert pool.use_count() == 1
    segments = pool.snapshot()
    assert len(segments) == 1
    starts = {s["address"] for s in segments}
    assert any(s <= t.data_ptr() < s + seg["total_size"] for seg in segments for s in [seg["address"]])
    assert not any(s <= outside.data_ptr() < s + seg["total_size"] for seg in segments for s in [seg["address"]])
    pool_id = pool.id
    del t, pool
    torch.openreg.empty_cache()
    assert not _segments_of(pool_id), starts


def test_mem_pool_memory_is_reused_only_inside_the_pool():
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        t = torch.empty(1000, device=DEV)
    address = t.data_ptr()
    del t
    assert address not in {torch.empty(1000, device=DEV).data_ptr() for _ in range(3)}
    with torch.openreg.use_mem_pool(pool):
        assert torch.empty(1000, device=DEV).data_ptr() == address


def _run(code: str, **env_extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENREG_")}
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


def test_race_checker_finds_a_missing_join_after_a_replay():
    code = """
        import torch
        x = torch.zeros(1 << 12, device="openreg")
        g = torch.openreg.OpenRegGraph()
        with torch.openreg.graph(g):
            y = x * 2
        side = torch.openreg.Stream()
        g.replay()                    # writes y on the current stream
        with torch.openreg.stream(side):
            {join}
            z = y + 1                 # reads y on a side stream
        print("NO RACE")
    """
    racy = _run(code.format(join="pass"), OPENREG_SANITIZER="1")
    assert racy.returncode != 0 and "NO RACE" not in racy.stdout, racy.stdout + racy.stderr
    assert "graph" in racy.stderr and "race" in racy.stderr.lower(), racy.stderr
    joined = _run(code.format(join="side.wait_stream(torch.openreg.default_stream())"), OPENREG_SANITIZER="1")
    assert joined.returncode == 0 and "NO RACE" in joined.stdout, joined.stderr


def test_replay_costs_one_launch_on_the_virtual_clock():
    code = """
        import torch
        x = torch.zeros(256, device="openreg")
        def work():
            y = x
            for _ in range(50):
                y = y + 1
            return y
        work(); torch.openreg.synchronize()
        g = torch.openreg.OpenRegGraph()
        with torch.openreg.graph(g):
            work()
        launch = torch.openreg.timing.profile()["launch_us"] * 1e-6
        t0 = torch.openreg.timing.now(); work(); eager = torch.openreg.timing.now() - t0
        torch.openreg.synchronize()
        t0 = torch.openreg.timing.now(); g.replay(); replay = torch.openreg.timing.now() - t0
        torch.openreg.synchronize()
        with torch.openreg.timing.region() as r_eager:
            work()
        with torch.openreg.timing.region() as r_graph:
            g.replay()
        print(eager, replay, launch, r_eager.wall, r_graph.wall, r_eager.devices[0].kernels, r_graph.devices[0].kernels)
    """
    r = _run(code, OPENREG_DEVICE_PROFILE="h100-sxm")
    assert r.returncode == 0, r.stderr
    eager, replay, launch, wall_eager, wall_graph, k_eager, k_graph = map(float, r.stdout.split())
    assert replay == pytest.approx(launch)  # one launch, whatever the node count
    assert eager >= 50 * launch
    assert k_eager == k_graph == 50
    assert wall_graph < wall_eager  # the device no longer waits for the host between kernels


def test_a_compiled_function_can_be_captured_and_replayed():
    x = torch.randn(64, device=DEV)
    f = torch.compile(lambda a: (a * 2).relu() + 1)
    f(x)
    g, y = capture(lambda: f(x))
    x.fill_(3.0)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((64,), 7.0))
    x.fill_(-1.0)
    g.replay()
    assert torch.equal(y.cpu(), torch.full((64,), 1.0))
