"""Streams: torch.openreg.Stream, the current-stream API, and the generic torch.Stream on openreg."""

import threading

import pytest
import torch

# Elements of the tensors that keep a stream busy for a while (tens of milliseconds), so that work
# another stream failed to wait for would visibly still be running.
BIG = 1 << 24


def test_current_stream_starts_as_the_default_stream():
    for i in range(torch.openreg.device_count()):
        current = torch.openreg.current_stream(i)
        default = torch.openreg.default_stream(i)
        assert isinstance(current, torch.openreg.Stream)
        assert isinstance(current, torch.Stream)
        assert current == default
        assert current.device == torch.device("openreg", i)
        assert torch.accelerator.current_stream(i) == current


def test_new_streams_are_not_the_default_stream():
    default = torch.openreg.default_stream()
    s = torch.openreg.Stream()
    generic = torch.Stream(device="openreg")
    assert s != default and generic != default
    assert s.device == torch.device("openreg:0")
    assert generic.device == torch.device("openreg:0")
    high = torch.openreg.Stream(device=1, priority=-1)
    assert high.device == torch.device("openreg:1")
    assert high != torch.openreg.default_stream(1)
    # streams are values: usable as dict keys and equal to their re-wrapped selves
    wrapped = torch.openreg.Stream(stream_id=s.stream_id, device_index=s.device_index, device_type=s.device_type)
    assert wrapped == s and hash(wrapped) == hash(s)
    assert len({s, wrapped, default}) == 2


def test_stream_constructor_uses_the_current_device():
    with torch.openreg.device(1):
        assert torch.openreg.Stream().device == torch.device("openreg:1")


def test_stream_context_switches_and_restores():
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        assert torch.openreg.current_stream() == s
        assert torch.accelerator.current_stream() == s
        inner = torch.openreg.Stream()
        with torch.openreg.stream(inner):
            assert torch.openreg.current_stream() == inner
        assert torch.openreg.current_stream() == s
    assert torch.openreg.current_stream() == torch.openreg.default_stream()


def test_stream_context_of_another_device_restores_both_devices():
    s1 = torch.openreg.Stream(device=1)
    with torch.openreg.stream(s1):
        assert torch.openreg.current_device() == 1
        assert torch.openreg.current_stream(1) == s1
        assert torch.openreg.current_stream(0) == torch.openreg.default_stream(0)
    assert torch.openreg.current_device() == 0
    assert torch.openreg.current_stream(1) == torch.openreg.default_stream(1)


def test_stream_context_none_is_a_noop():
    with torch.openreg.stream(None):
        assert torch.openreg.current_stream() == torch.openreg.default_stream()


def test_stream_context_restores_after_exception():
    s = torch.openreg.Stream()
    with pytest.raises(KeyError):
        with torch.openreg.stream(s):
            raise KeyError("inside")
    assert torch.openreg.current_stream() == torch.openreg.default_stream()


def test_generic_stream_as_context_manager():
    s = torch.Stream(device="openreg:1")
    with s:
        assert torch.openreg.current_device() == 1
        assert torch.openreg.current_stream(1) == s
    assert torch.openreg.current_device() == 0
    assert torch.openreg.current_stream(1) == torch.openreg.default_stream(1)


def test_set_stream_makes_stream_and_its_device_current():
    s1 = torch.openreg.Stream(device=1)
    torch.openreg.set_stream(s1)
    assert torch.openreg.current_device() == 1
    assert torch.openreg.current_stream() == s1
    torch.openreg.set_stream(None)  # no-op
    assert torch.openreg.current_stream() == s1


def test_current_stream_is_per_thread():
    s = torch.openreg.Stream()
    torch.openreg.set_stream(s)
    seen = []
    t = threading.Thread(target=lambda: seen.append(torch.openreg.current_stream()))
    t.start()
    t.join()
    assert seen == [torch.openreg.default_stream()]
    assert torch.openreg.current_stream() == s


def test_work_on_a_side_stream_runs_in_order():
    s = torch.openreg.Stream()
    with torch.openreg.stream(s):
        x = torch.empty(BIG, device="openreg")
        for value in range(1, 6):
            x.fill_(value)
        y = torch.empty_like(x)
        y.copy_(x)
        y[:10].fill_(-1.0)
    s.synchronize()
    assert s.query()
    host = y.cpu()
    assert host[:10].eq(-1.0).all()
    assert host[10:].eq(5.0).all()


def test_query_is_true_after_synchronize():
    s = torch.Stream(device="openreg:1")
    with s:
        x = torch.empty(BIG, device="openreg:1")
        x.fill_(1.0)
    s.synchronize()
    assert s.query()


def test_wait_stream_orders_work_across_streams():
    producer = torch.openreg.Stream()
    consumer = torch.openreg.Stream()
    with torch.openreg.stream(producer):
        x = torch.zeros(BIG, device="openreg")
        x.fill_(7.0)
    consumer.wait_stream(producer)
    with torch.openreg.stream(consumer):
        y = torch.empty(1000, device="openreg")
        y.copy_(x[-1000:])
    consumer.synchronize()
    assert y.cpu().eq(7.0).all()
    producer.synchronize()


def test_wait_event_orders_work_across_devices():
    s0 = torch.openreg.Stream(device=0)
    s1 = torch.openreg.Stream(device=1)
    with torch.openreg.stream(s0):
        x = torch.zeros(BIG, device="openreg:0")
        x.fill_(9.0)
    event = s0.record_event()
    assert isinstance(event, torch.openreg.Event)
    s1.wait_event(event)
    with torch.openreg.stream(s1):
        y = torch.empty(1000, device="openreg:1")
        y.copy_(x[-1000:])
    s1.synchronize()
    assert y.cpu().eq(9.0).all()
    s0.synchronize()


def test_generic_stream_wait_stream_across_devices():
    s0 = torch.Stream(device="openreg:0")
    s1 = torch.Stream(device="openreg:1")
    with s0:
        x = torch.zeros(BIG, device="openreg:0")
        x.fill_(4.0)
    s1.wait_stream(s0)
    with s1:
        y = torch.empty(1000, device="openreg:1")
        y.copy_(x[:1000])
    s1.synchronize()
    assert y.cpu().eq(4.0).all()
    s0.synchronize()


def test_device_synchronize_waits_for_every_stream():
    streams = [torch.openreg.Stream() for _ in range(3)]
    outs = []
    for value, s in enumerate(streams):
        with torch.openreg.stream(s):
            t = torch.empty(BIG // 4, device="openreg")
            t.fill_(float(value))
            outs.append(t)
    torch.openreg.synchronize()
    assert all(s.query() for s in streams)
    for value, t in enumerate(outs):
        assert t[-1].item() == float(value)


def _rewrapped(stream):
    return torch.openreg.Stream(stream_id=stream.stream_id, device_index=stream.device_index,
                                device_type=stream.device_type)


def test_priority_range_is_cudas_convention():
    assert torch.openreg.Stream.priority_range() == (0, -1)
    assert torch.openreg.priority_range() == (0, -1)


@pytest.mark.parametrize("requested, expected", [(0, 0), (-1, -1), (-5, -1), (4, 0)])
def test_stream_priority_is_honoured_and_clamped_like_cuda(requested, expected):
    for device in range(torch.openreg.device_count()):
        s = torch.openreg.Stream(device=device, priority=requested)
        assert s.priority == expected
        # torch.Stream passes the priority through the device guard too
        assert _rewrapped(torch.Stream(device=f"openreg:{device}", priority=requested)).priority == expected


def test_default_and_rewrapped_streams_report_their_priority():
    assert torch.openreg.default_stream().priority == 0
    assert torch.openreg.current_stream(1).priority == 0
    high = torch.openreg.Stream(priority=-1)
    assert _rewrapped(high).priority == -1
    with torch.openreg.stream(high):
        assert torch.openreg.current_stream().priority == -1


def test_external_stream_is_refused_clearly():
    s = torch.openreg.Stream()
    with pytest.raises(RuntimeError, match="ExternalStream is not supported"):
        torch.openreg.ExternalStream(s.native_handle)


def _not_events():
    return [torch.openreg.Stream(), torch.openreg.current_stream(), 3, None, "event", torch.ones(1, device="openreg")]


def test_stream_methods_refuse_an_argument_of_the_wrong_type_with_a_type_error():
    # Note [Stream methods check their argument]: torch.Stream read any object as an Event or a Stream.
    s = torch.openreg.Stream()
    for bad in _not_events():
        with pytest.raises(TypeError, match="expected a torch.Event"):
            s.wait_event(bad)
        if bad is not None:  # record_event(None) records a new event
            with pytest.raises(TypeError, match="expected a torch.Event"):
                s.record_event(bad)
    for bad in (torch.openreg.Event(), 3, None, "stream", torch.ones(1, device="openreg")):
        with pytest.raises(TypeError, match="expected a torch.Stream"):
            s.wait_stream(bad)
    # the right types still work
    e = s.record_event()
    assert isinstance(e, torch.Event)
    torch.openreg.current_stream().wait_event(e)
    torch.openreg.current_stream().wait_stream(s)
    assert s.record_event(torch.openreg.Event()).device.type == "openreg"
