"""Bad input: a clear error of the type torch.cuda users expect, never a crash or a hang, and the process
stays usable afterwards."""

import pytest
import torch

INVALID_INDEX = 2  # the suite runs with 2 devices


@pytest.mark.parametrize(
    "call",
    [
        lambda: torch.openreg.set_device(INVALID_INDEX),
        lambda: torch.openreg.synchronize(INVALID_INDEX),
        lambda: torch.openreg.synchronize(-1),
        lambda: torch.openreg.current_stream(INVALID_INDEX),
        lambda: torch.openreg.default_stream(INVALID_INDEX),
        lambda: torch.openreg.Stream(device=INVALID_INDEX),
        lambda: torch.openreg.memory_allocated(INVALID_INDEX),
        lambda: torch.openreg.memory_stats(-1),
        lambda: torch.openreg.get_device_properties(INVALID_INDEX),
        lambda: torch.openreg.get_rng_state(INVALID_INDEX),
        lambda: torch.openreg.device(INVALID_INDEX).__enter__(),
        lambda: torch.empty(1, device=f"openreg:{INVALID_INDEX}"),
        lambda: torch.ones(2).to(f"openreg:{INVALID_INDEX}"),
    ],
    ids=[
        "set_device",
        "synchronize",
        "synchronize_negative",
        "current_stream",
        "default_stream",
        "Stream",
        "memory_allocated",
        "memory_stats_negative",
        "get_device_properties",
        "get_rng_state",
        "device_context",
        "empty",
        "to",
    ],
)
def test_invalid_device_index_raises_accelerator_error(call):
    with pytest.raises(torch.AcceleratorError, match="invalid device ordinal"):
        call()
    assert torch.openreg.current_device() == 0
    assert torch.ones(2, device="openreg").cpu().sum().item() == 2.0


@pytest.mark.parametrize("device", [1.5, "cpu", torch.device("cpu"), "cuda:0", [0], object(), True])
def test_wrong_device_type_raises_value_error(device):
    with pytest.raises(ValueError):
        torch.openreg.set_device(device)
    with pytest.raises(ValueError):
        torch.openreg.memory_allocated(device)


def test_malformed_device_string_raises_runtime_error():
    with pytest.raises(RuntimeError):
        torch.openreg.set_device("not-a-device")
    with pytest.raises(RuntimeError, match="negative"):
        torch.device("openreg", -1)


def test_device_index_is_required_where_there_is_no_default():
    with pytest.raises(ValueError):
        torch.openreg.set_device(None)


def test_set_stream_rejects_streams_of_another_device_type():
    cpu_stream = torch.Stream(stream_id=0, device_index=-1, device_type=0)  # a CPU stream
    with pytest.raises(ValueError, match="openreg"):
        torch.openreg.set_stream(cpu_stream)
    with pytest.raises(ValueError, match="openreg"):
        torch.openreg.stream(cpu_stream)
    with pytest.raises(TypeError):
        torch.openreg.set_stream("openreg:0")
    assert torch.openreg.current_stream() == torch.openreg.default_stream()


# torch.openreg.Event is a torch.Event, whose elapsed_time raises ValueError for these (on CUDA too).
def test_elapsed_time_of_unrecorded_event_raises():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(end)
    end.record()
    end.synchronize()
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(end)  # start still unrecorded


def test_elapsed_time_of_non_timing_events_raises():
    start = torch.openreg.Event()
    end = torch.openreg.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        start.elapsed_time(end)


def test_interprocess_events_are_refused():
    with pytest.raises(ValueError, match="interprocess"):
        torch.openreg.Event(interprocess=True)


def test_out_of_memory_raises_and_the_device_stays_usable():
    torch.openreg.synchronize()
    before = torch.openreg.memory_allocated()
    capacity = torch.openreg.get_device_properties(0).total_memory
    with pytest.raises(torch.OutOfMemoryError, match="out of memory"):
        torch.empty(capacity + (1 << 20), dtype=torch.uint8, device="openreg")
    assert issubclass(torch.openreg.OutOfMemoryError, RuntimeError)
    assert torch.openreg.memory_allocated() == before
    x = torch.full((4,), 3.0, device="openreg")
    assert x.cpu().sum().item() == 12.0


def test_out_of_memory_after_filling_the_device(run_python, check_ok):
    # A small capacity: the allocator must give up when memory is really used up, not only for one
    # oversized request, and recover once tensors are freed.
    proc = run_python(
        """
        import torch
        held = []
        try:
            for _ in range(100):
                held.append(torch.empty(1 << 20, dtype=torch.uint8, device="openreg"))
        except torch.OutOfMemoryError as err:
            print("OOM after", len(held), "MiB:", err)
        else:
            raise AssertionError("100 MiB fitted into 16 MiB")
        assert 0 < len(held) <= 16
        held.clear()
        torch.openreg.synchronize()
        torch.openreg.empty_cache()
        again = [torch.empty(1 << 20, dtype=torch.uint8, device="openreg") for _ in range(8)]
        print("RECOVERED")
        """,
        env={"OPENREG_MEMORY_CAPACITY": "16MiB"},
    )
    check_ok(proc)
    assert "RECOVERED" in proc.stdout


@pytest.mark.parametrize(
    "variable,value",
    [
        ("OPENREG_DEVICE_COUNT", "two"),
        ("OPENREG_MEMORY_CAPACITY", "12 parsecs"),
    ],
)
def test_malformed_environment_variable_is_named(run_python, check_ok, variable, value):
    # Two variables stand for all: the sim's C++ tests cover each variable's parsing.
    proc = run_python(
        f"""
        import torch
        assert torch.openreg.device_count() == 0
        assert not torch.openreg.is_available()
        for attempt in range(2):  # the error is stable, not a one-off
            try:
                torch.empty(1, device="openreg")
            except RuntimeError as err:
                assert "{variable}" in str(err), err
            else:
                raise AssertionError("a malformed {variable} was accepted")
        try:
            torch.openreg.init()
        except RuntimeError as err:
            assert "{variable}" in str(err), err
        else:
            raise AssertionError("init() accepted a malformed {variable}")
        assert not torch.openreg.is_initialized()
        assert torch.ones(3).sum().item() == 3.0  # the process stays usable
        print("NAMED")
        """,
        env={variable: value},
    )
    check_ok(proc)
    assert "NAMED" in proc.stdout


@pytest.mark.parametrize(
    "op",
    [
        lambda a, b: a.floor_divide_(b),
        lambda a, b: a.ldexp_(b.to(torch.int64)),
        lambda a, b: torch.mul(a, b, out=a),  # an out= output that is also an input
        lambda a, b: a.add_(b),
    ],
    ids=["floor_divide_", "ldexp_", "mul_out_aliasing_an_input", "add_"],
)
def test_an_in_place_op_never_resizes_self(op):
    """Note [In-place ops keep self's shape]: CPU's error at the call, and self keeps its shape and
    values (floor_divide_ and ldexp_ used to resize self to the broadcast shape, with a warning)."""
    errors = []
    for device in ("cpu", "openreg"):
        a = torch.arange(5.0, device=device).view(5, 1) + 1
        b = torch.arange(5.0, device=device) + 2
        with pytest.raises(RuntimeError) as err:
            op(a, b)
        errors.append(str(err.value))
        assert a.shape == (5, 1)
        assert a.cpu().flatten().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert errors[0] == errors[1] == "output with shape [5, 1] doesn't match the broadcast shape [5, 5]"


_HOST_CHECKED = {
    "indices_that_cannot_broadcast": lambda d: torch.zeros(3, 3, device=d).__setitem__(
        (torch.tensor([0, 1]), torch.tensor([0, 1, 2])), 0),
    "accumulate_into_empty_indices": lambda d: torch.zeros(3, device=d).index_put_(
        (torch.tensor([], dtype=torch.long),), torch.ones(2, device=d), accumulate=True),
    "mask_assignment_of_the_wrong_count": lambda d: torch.zeros(4, device=d).__setitem__(
        torch.tensor([True, False, True, False], device=d), torch.ones(3, device=d)),
    "masked_scatter_into_a_smaller_self": lambda d: torch.zeros(2, 1, device=d).masked_scatter_(
        torch.ones(2, 2, dtype=torch.bool, device=d), torch.ones(4, device=d)),
    "bucketize_with_2d_boundaries": lambda d: torch.bucketize(
        torch.zeros(3, device=d), torch.zeros(2, 2, device=d)),
    "uniform_from_above_to": lambda d: torch.empty(4, device=d).uniform_(3, -1),
    "logit_into_an_integer_self": lambda d: torch.ones(4, dtype=torch.long, device=d).logit_(),
    "masked_fill_with_a_value_out_of_range": lambda d: torch.zeros(4, dtype=torch.half, device=d).masked_fill_(
        torch.ones(4, dtype=torch.bool, device=d), 1e10),
    "complex_of_mixed_dtypes": lambda d: torch.complex(
        torch.zeros(3, device=d), torch.zeros(3, dtype=torch.double, device=d)),
    "group_norm_of_a_non_contiguous_input": lambda d: torch.native_group_norm(
        torch.zeros(4, 6, 5, device=d).transpose(0, 2), None, None, 5, 6, 4, 1, 1e-5),
    "addr_into_a_0d_self": lambda d: torch.zeros((), device=d).addr_(torch.ones(2, device=d), torch.ones(3, device=d)),
}

# Note [out= dtypes checked at the call]: out= tensors of a dtype the op cannot write.
_OUT_DTYPE_REFUSED = {
    "tril": lambda d: torch.tril(torch.ones(3, 3, dtype=torch.bool, device=d), out=torch.empty(3, 3, device=d)),
    "sort": lambda d: torch.sort(torch.ones(4, dtype=torch.bool, device=d),
                                 out=(torch.empty(4, device=d), torch.empty(4, dtype=torch.long, device=d))),
    "index_select": lambda d: torch.index_select(torch.ones(4, dtype=torch.bool, device=d), 0,
                                                 torch.tensor([0, 1], device=d), out=torch.empty(2, device=d)),
    "amax": lambda d: torch.amax(torch.ones(4, dtype=torch.bool, device=d), 0, out=torch.empty((), device=d)),
    "cumsum": lambda d: torch.cumsum(torch.ones(4, dtype=torch.int16, device=d), 0,
                                     out=torch.empty(4, dtype=torch.bool, device=d)),
    "angle": lambda d: torch.angle(torch.ones(4, device=d), out=torch.empty(4, dtype=torch.long, device=d)),
    "aminmax": lambda d: torch.aminmax(torch.ones(4, device=d),
                                       out=(torch.empty((), dtype=torch.double, device=d),
                                            torch.empty((), dtype=torch.double, device=d))),
    "angle_into_its_input_dtype": lambda d: torch.angle(torch.ones(4, dtype=torch.long, device=d),
                                                        out=torch.empty(4, dtype=torch.long, device=d)),
    "isin_into_float": lambda d: torch.isin(torch.ones(4, device=d), torch.ones(2, device=d),
                                            out=torch.empty(4, device=d)),
    "all_into_float": lambda d: torch.all(torch.ones((), device=d), 0, keepdim=True, out=torch.empty((), device=d)),
    "normal": lambda d: torch.normal(torch.zeros(4, device=d), 1.0, out=torch.empty(4, dtype=torch.long, device=d)),
}


@pytest.mark.parametrize("name", list(_HOST_CHECKED))
def test_argument_checks_cuda_makes_on_the_host_raise_at_the_call(name):
    """Note [Host-side checks at the call]: these errors reached the program at the next synchronize,
    from the device thread; CPU and CUDA raise them at the call."""
    raised = []
    for device in ("cpu", "openreg"):
        with pytest.raises(Exception) as err:
            _HOST_CHECKED[name](device)
        raised.append((type(err.value), str(err.value).split("\n")[0]))
    assert raised[0] == raised[1]
    torch.openreg.synchronize()  # nothing was left on the stream to fail later


@pytest.mark.parametrize("name", list(_OUT_DTYPE_REFUSED))
def test_out_tensors_of_a_dtype_the_op_cannot_write_raise_at_the_call(name):
    """Note [out= dtypes checked at the call]: CPU's (and CUDA's) error at the call; openreg raised it
    at the next synchronize, from the device thread."""
    raised = []
    for device in ("cpu", "openreg"):
        with pytest.raises(Exception) as err:
            _OUT_DTYPE_REFUSED[name](device)
        raised.append((type(err.value), str(err.value).split("\n")[0]))
    assert raised[0][0] == raised[1][0]
    # CPU's message; a dtype CPU's kernel does not support is refused by openreg's coverage check, whose
    # message quotes CPU's.
    assert raised[0][1] == raised[1][1] or raised[1][1].endswith("says: " + raised[0][1])
    torch.openreg.synchronize()  # nothing was left on the stream to fail later


def test_out_tensors_of_another_dtype_that_the_op_accepts_still_compute_as_cpu():
    results = {}
    for device in ("cpu", "openreg"):
        x = torch.arange(12.0, device=device).view(3, 4).flip(1)
        i = torch.arange(6, device=device)
        outs = [torch.argmax(x, 1, out=torch.empty(3, dtype=torch.long, device=device)),
                torch.lt(x, 5, out=torch.empty(3, 4, dtype=torch.bool, device=device)),
                torch.add(i, i, out=torch.empty(6, device=device)),
                torch.sum(i, 0, dtype=torch.float64, out=torch.empty((), dtype=torch.float64, device=device)),
                torch.mul(i, 2, out=torch.empty(6, dtype=torch.float64, device=device))]
        results[device] = [o.cpu() for o in outs]
    for expected, got in zip(results["cpu"], results["openreg"]):
        assert got.dtype == expected.dtype and torch.equal(got, expected)


@pytest.mark.parametrize("op", ["mv", "matmul"])
def test_a_matrix_vector_product_resizes_a_wrong_sized_out_as_cpu(op):
    """mv.out and matmul's out= run addmv.out with out= as its self; CPU resizes a wrong-sized out=
    with the resize warning, where openreg raised TensorIterator's error."""
    import warnings

    results = []
    for device in ("cpu", "openreg"):
        m = torch.arange(15.0, device=device).view(5, 3)
        v = torch.arange(3.0, device=device)
        out = torch.empty(1, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            getattr(torch, op)(m, v, out=out)
        results.append((out.cpu(), sum("resized" in str(w.message) for w in caught)))
    assert torch.equal(results[0][0], results[1][0])
    assert results[0][1] == results[1][1] == 1


def test_index_put_and_masked_scatter_still_compute_as_cpu():
    for device in ("cpu", "openreg"):
        x = torch.zeros(3, 3, device=device)
        x[torch.tensor([0, 2]), torch.tensor([1, 2])] = torch.tensor([5.0, 6.0], device=device)
        x.index_put_((torch.tensor([0, 0]),), torch.ones(2, 3, device=device), accumulate=True)
        x[x > 5.5] = -1.0
        y = torch.zeros(2, 2, device=device).masked_scatter_(
            torch.tensor([[True, False], [False, True]], device=device), torch.arange(4.0, device=device))
        if device == "cpu":
            expected = (x.clone(), y.clone())
        else:
            assert torch.equal(x.cpu(), expected[0]) and torch.equal(y.cpu(), expected[1])


MULTINOMIAL_ERRORS = {
    "more samples than categories without replacement": lambda d: torch.multinomial(torch.ones(3, device=d), 5),
    "no samples": lambda d: torch.multinomial(torch.ones(3, device=d), 0),
    "integer probabilities": lambda d: torch.multinomial(torch.ones(3, dtype=torch.long, device=d), 1),
    "negative probability": lambda d: torch.multinomial(torch.tensor([1.0, -1.0], device=d), 1),
    "zero sum": lambda d: torch.multinomial(torch.zeros(2, 3, device=d), 2),
    "nan": lambda d: torch.multinomial(torch.tensor([1.0, float("nan")], device=d), 1, replacement=True),
}


def _raises_at_the_call_as_on_cpu(call):
    with pytest.raises(RuntimeError) as expected:
        call("cpu")
    with pytest.raises(RuntimeError) as got:
        call("openreg")
    assert str(got.value).split("\n")[0] == str(expected.value).split("\n")[0]
    torch.openreg.synchronize()  # nothing left to fail later


@pytest.mark.parametrize("name", sorted(MULTINOMIAL_ERRORS))
def test_multinomial_checks_raise_at_the_call_as_on_cpu(name):
    """Host-side checks of CPU's and CUDA's multinomial (the .item() reads that validate the distribution
    when it draws without replacement or one sample) arrived at the next synchronize."""
    _raises_at_the_call_as_on_cpu(MULTINOMIAL_ERRORS[name])


def test_multinomial_with_replacement_stays_asynchronous():
    probs = torch.ones(2, 4, device="openreg")
    torch.openreg.synchronize()
    torch.openreg.set_sync_debug_mode("error")
    try:
        samples = torch.multinomial(probs, 3, replacement=True)
    finally:
        torch.openreg.set_sync_debug_mode(0)
    assert samples.shape == (2, 3) and bool(((samples >= 0) & (samples < 4)).all())


AT_THE_CALL = {
    # The composite of all/any over a list of dims copied into out= without CPU's bool check.
    "all(dim=()) into a float out=": lambda d: torch.all(
        torch.tensor(1.0, device=d), dim=(), out=torch.empty((), device=d)
    ),
    "any(dim=(0,)) into a float out=": lambda d: torch.any(
        torch.ones(3, device=d), dim=(0,), out=torch.empty((), device=d)
    ),
    "relu of a bool tensor": lambda d: torch.relu(torch.tensor([True, False], device=d)),
    "relu_ of a bool tensor": lambda d: torch.tensor([True, False], device=d).relu_(),
    # CUDA reads a device value with .item(): a value that does not fit self's dtype fails at the call.
    "masked_fill_ with a device value that overflows": lambda d: torch.zeros(
        3, dtype=torch.int8, device=d
    ).masked_fill_(torch.tensor([True, False, True], device=d), torch.tensor(1000.0, device=d)),
}


@pytest.mark.parametrize("name", sorted(AT_THE_CALL))
def test_errors_cpu_raises_at_the_call_come_at_the_call(name):
    _raises_at_the_call_as_on_cpu(AT_THE_CALL[name])
