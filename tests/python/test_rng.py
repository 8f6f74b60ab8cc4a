"""Random numbers: one default generator per device, seeded and saved like torch.cuda's."""

import warnings

import torch


def _draw(device="openreg:0", n=16):
    return torch.randn(n, device=device).cpu()


def test_manual_seed_makes_draws_repeatable():
    torch.openreg.manual_seed(1234)
    first = _draw()
    torch.openreg.manual_seed(1234)
    second = _draw()
    torch.openreg.manual_seed(4321)
    third = _draw()
    assert torch.equal(first, second)
    assert not torch.equal(first, third)
    assert torch.openreg.initial_seed() == 4321


def test_manual_seed_seeds_the_current_device_only():
    torch.openreg.manual_seed_all(7)
    ref1 = _draw("openreg:1")
    torch.openreg.manual_seed_all(7)
    with torch.openreg.device(0):
        torch.openreg.manual_seed(99)
    assert torch.equal(_draw("openreg:1"), ref1)  # device 1 still at seed 7
    with torch.openreg.device(1):
        assert torch.openreg.initial_seed() == 7
    assert torch.openreg.initial_seed() == 99


def test_devices_have_independent_generators():
    torch.openreg.manual_seed_all(11)
    a0 = _draw("openreg:0")
    a1 = _draw("openreg:1")
    torch.openreg.manual_seed_all(11)
    b1 = _draw("openreg:1")  # drawing on device 1 first does not shift device 0's sequence
    b0 = _draw("openreg:0")
    assert torch.equal(a0, b0)
    assert torch.equal(a1, b1)


def test_torch_manual_seed_seeds_openreg_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.manual_seed(2024)
    first = (_draw("openreg:0"), _draw("openreg:1"))
    torch.manual_seed(2024)
    second = (_draw("openreg:0"), _draw("openreg:1"))
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])
    for i in range(torch.openreg.device_count()):
        with torch.openreg.device(i):
            assert torch.openreg.initial_seed() == 2024


def test_rng_state_save_and_restore():
    torch.openreg.manual_seed(5)
    state = torch.openreg.get_rng_state()
    assert state.device == torch.device("cpu") and state.dtype == torch.uint8
    first = _draw()
    torch.openreg.set_rng_state(state)
    assert torch.equal(_draw(), first)
    # device argument forms
    state1 = torch.openreg.get_rng_state("openreg:1")
    after1 = _draw("openreg:1")
    torch.openreg.set_rng_state(state1, 1)
    assert torch.equal(_draw("openreg:1"), after1)
    assert torch.equal(torch.openreg.get_rng_state(torch.device("openreg:1")), torch.openreg.get_rng_state(1))


def test_rng_state_all():
    torch.openreg.manual_seed_all(3)
    states = torch.openreg.get_rng_state_all()
    assert len(states) == torch.openreg.device_count()
    firsts = [_draw(f"openreg:{i}") for i in range(len(states))]
    torch.openreg.set_rng_state_all(states)
    assert all(torch.equal(_draw(f"openreg:{i}"), firsts[i]) for i in range(len(states)))


def test_seed_all_gives_every_device_the_same_random_seed():
    torch.openreg.seed_all()
    seeds = []
    for i in range(torch.openreg.device_count()):
        with torch.openreg.device(i):
            seeds.append(torch.openreg.initial_seed())
    assert len(set(seeds)) == 1
    torch.openreg.seed()  # a fresh 64-bit random seed: equal to the old one with negligible probability
    assert torch.openreg.initial_seed() != seeds[0]


def test_explicit_generator_on_a_device():
    g = torch.Generator(device="openreg:1")
    g.manual_seed(8)
    first = torch.randn(8, device="openreg:1", generator=g).cpu()
    g.manual_seed(8)
    assert torch.equal(torch.randn(8, device="openreg:1", generator=g).cpu(), first)
