"""The first ops on openreg do not import torch._dynamo and sympy (0.3 to 1 s), as on CUDA.

Their Meta kernels are Python references; Note [Meta kernels written in Python] (backend/engine/ShapePass.cpp).
"""

import pytest

RANDOM_OPS = [
    "torch.randn(4, device='openreg')",
    "torch.empty(4, device='openreg').normal_()",
    "torch.normal(torch.zeros(4, device='openreg'), 1.0)",
    "torch.nn.functional.dropout(torch.ones(4, device='openreg'), 0.5)",
    "torch.empty(4, device='openreg').exponential_()",
    "torch.empty(4, device='openreg').log_normal_()",
    "torch.empty(4, device='openreg').cauchy_()",
    "torch.empty(4, device='openreg').geometric_(0.5)",
    "torch.ones(4, device='openreg').mul_(torch.tensor(2.0).item())",
    "torch.ones(256, 256, device='openreg').t().mul_(3.0)",
]


@pytest.mark.parametrize("op", RANDOM_OPS)
def test_op_imports_neither_dynamo_nor_sympy(run_python, check_ok, op):
    check_ok(run_python(f"""
        import sys, torch
        r = {op}
        r.cpu()
        torch.openreg.synchronize()
        loaded = [m for m in ("torch._dynamo", "sympy") if m in sys.modules]
        assert not loaded, loaded
    """))


def test_random_op_errors_are_still_raised_at_the_call(run_python, check_ok):
    check_ok(run_python("""
        import torch
        t = torch.empty(4, device="openreg")
        for bad in (lambda: t.normal_(0, -1), lambda: t.exponential_(-1), lambda: t.geometric_(2)):
            try:
                bad()
            except RuntimeError:
                pass
            else:
                raise AssertionError("accepted a bad argument")
        assert torch.isfinite(t.normal_().cpu()).all()
    """))


def test_shape_pass_on_cpu_gives_cpus_geometry_and_values(run_python, check_ok):
    # Results whose shapes came from CPU kernels on scratch memory: same geometry and values as CPU,
    # non-contiguous inputs included, and the private generator leaves CPU's and openreg's seeds alone.
    check_ok(run_python("""
        import torch
        a = torch.arange(12.0).reshape(3, 4)
        ops = (lambda t: t.clone().mul_(3.0), lambda t: torch.normal(t, 0.0), lambda t: t.clone().exponential_())
        for x in (a, a.t(), a[:, ::2]):
            wants = [f(x) for f in ops]  # CPU's draws happen here, before the state is taken
            d = x.to("openreg")
            cpu_before = torch.get_rng_state()
            for f, want in zip(ops, wants):
                got = f(d)
                assert got.shape == want.shape and got.stride() == want.stride(), (got.stride(), want.stride())
            assert torch.equal(torch.normal(d, 0.0).cpu(), x)  # std 0: the mean itself
            torch.openreg.synchronize()
            assert torch.equal(torch.get_rng_state(), cpu_before)
        torch.openreg.manual_seed(5)
        r1 = torch.randn(8, device="openreg").cpu()
        torch.openreg.manual_seed(5)
        assert torch.equal(torch.randn(8, device="openreg").cpu(), r1)
    """))


def test_first_time_op_shapes_import_no_python_module(run_python, check_ok):
    # Large storages (16 MB, past what the shape pass once ran on CPU scratch) and 0-d operands: their
    # Python Meta kernels imported torch._dynamo and sympy (1 s) at the first such op. Nothing is warmed:
    # the first op also starts the runtime.
    check_ok(run_python("""
        import sys, torch
        before = set(sys.modules)
        big = torch.randn(2000, 2000, device="openreg")              # random, large
        two = torch.tensor(2.0, device="openreg")                    # a 0-d device tensor
        ints = torch.ones(2000, 2000, device="openreg", dtype=torch.int32)
        results = [
            big * two, two * big, big + torch.tensor(2, device="openreg"),   # mixed 0-d / large
            ints * two, ints / 3, ints + 2.5,                                # type promotion
            big.t() * two, big[::2, 1:].exp(), big.view(-1)[:10].sin(),      # views
            big.sum(), big.mean(1), big.amax(0), ints.sum(dtype=torch.int64),  # reductions
            big.clone().mul_(two), big.clone().add_(big, alpha=0.5), big.clone().clamp_(min=two),  # in place
            torch.empty(2000, 2000, device="openreg").normal_(), torch.rand_like(big),  # random
            torch.nn.functional.dropout(big, 0.5), torch.empty_like(big).uniform_(),
            torch.where(big > 0, two, torch.tensor(0.0, device="openreg")), big.pow(two),
            torch.lerp(big, big, two), big.masked_fill(big > 0, two),
        ]
        torch.openreg.synchronize()
        for r in results:
            r.cpu()
        new = sorted(set(sys.modules) - before)
        assert not new, new
    """))
