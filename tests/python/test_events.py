"""Events: torch.openreg.Event and the generic torch.Event on openreg streams."""

import torch

BIG = 1 << 24


def test_event_record_synchronize_query():
    event = torch.openreg.Event()
    assert isinstance(event, torch.Event)
    x = torch.empty(BIG, device="openreg")
    x.fill_(2.0)
    event.record()
    event.synchronize()
    assert event.query()
    assert event.device == torch.device("openreg:0")
    # the event covers the fill: the data is there without synchronizing the stream
    assert x[-1].item() == 2.0


def test_event_takes_the_device_of_its_recording_stream():
    s1 = torch.openreg.Stream(device=1)
    event = s1.record_event()
    event.synchronize()
    assert event.device == torch.device("openreg:1")


def test_record_on_explicit_stream_and_wait_on_another():
    producer = torch.openreg.Stream()
    consumer = torch.openreg.Stream()
    event = torch.openreg.Event()
    with torch.openreg.stream(producer):
        x = torch.zeros(BIG, device="openreg")
        x.fill_(5.0)
    event.record(producer)
    event.wait(consumer)
    with torch.openreg.stream(consumer):
        y = torch.empty(1000, device="openreg")
        y.copy_(x[-1000:])
    consumer.synchronize()
    assert y.cpu().eq(5.0).all()
    producer.synchronize()


def test_wait_defaults_to_the_current_stream():
    producer = torch.openreg.Stream()
    with torch.openreg.stream(producer):
        x = torch.zeros(BIG, device="openreg")
        x.fill_(6.0)
    event = producer.record_event()
    event.wait()  # the default stream waits
    y = torch.empty(1000, device="openreg")
    y.copy_(x[-1000:])
    torch.openreg.default_stream().synchronize()
    assert y.cpu().eq(6.0).all()
    producer.synchronize()


def test_elapsed_time_is_positive_around_real_work():
    start = torch.openreg.Event(enable_timing=True)
    end = torch.openreg.Event(enable_timing=True)
    x = torch.empty(BIG, device="openreg")
    start.record()
    for value in range(4):
        x.fill_(float(value))
    end.record()
    end.synchronize()
    elapsed_ms = start.elapsed_time(end)
    assert isinstance(elapsed_ms, float)
    assert elapsed_ms > 0.0


def test_generic_timed_events_on_a_side_stream():
    s = torch.Stream(device="openreg:1")
    start = torch.Event(device="openreg", enable_timing=True)
    end = torch.Event(device="openreg", enable_timing=True)
    with s:
        x = torch.empty(BIG, device="openreg:1")
        start.record(s)
        x.fill_(1.0)
        end.record(s)
    end.synchronize()
    assert end.query() and start.query()
    assert start.elapsed_time(end) > 0.0
    assert end.device == torch.device("openreg:1")


def test_stream_record_event_reuses_a_given_event():
    s = torch.openreg.Stream()
    event = torch.openreg.Event()
    assert s.record_event(event) is event
    event.synchronize()
    assert event.query()
