"""Small models trained on openreg:0 and openreg:1 follow the same loss curve as on CPU."""

import pytest
import torch
from torch import nn

STEPS = 20


def make_mlp():
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


def make_cnn():
    return nn.Sequential(
        # No bias before BatchNorm: its gradient is rounding noise, which Adam would amplify to lr-sized
        # steps that differ between any two summation orders.
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )


def data(kind):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(32, 16, generator=g) if kind == "mlp" else torch.randn(16, 3, 8, 8, generator=g)
    y = torch.randint(0, 4, (x.shape[0],), generator=g)
    return x, y


OPTIMIZERS = {
    "sgd": lambda p, foreach: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4, foreach=foreach),
    "adam": lambda p, foreach: torch.optim.Adam(p, lr=1e-2, foreach=foreach),
    "adamw": lambda p, foreach: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, foreach=foreach),
}


def train(kind, opt_name, foreach, device):
    torch.manual_seed(0)
    model = (make_mlp if kind == "mlp" else make_cnn)().to(device)
    opt = OPTIMIZERS[opt_name](model.parameters(), foreach)
    x, y = data(kind)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    # Read the losses only at the end, so the steps run back to back on the device.
    return torch.stack(losses).cpu(), {k: v.detach().cpu() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
@pytest.mark.parametrize("opt_name", sorted(OPTIMIZERS))
@pytest.mark.parametrize("foreach", [False, True])
def test_training_matches_cpu(kind, opt_name, foreach):
    ref_losses, ref_state = train(kind, opt_name, foreach, "cpu")
    assert ref_losses[-1] < ref_losses[0]
    for device in ("openreg:0", "openreg:1"):
        losses, state = train(kind, opt_name, foreach, device)
        torch.testing.assert_close(losses, ref_losses, rtol=1e-4, atol=1e-4)
        for k in ref_state:
            torch.testing.assert_close(state[k], ref_state[k], rtol=1e-3, atol=1e-4)


def test_parameters_stay_on_their_device():
    model = make_mlp().to("openreg:1")
    opt = torch.optim.Adam(model.parameters(), foreach=True)
    x, y = data("mlp")
    nn.functional.cross_entropy(model(x.to("openreg:1")), y.to("openreg:1")).backward()
    opt.step()
    for p in model.parameters():
        assert p.device == torch.device("openreg:1") and p.grad.device == p.device
    for state in opt.state.values():
        for v in state.values():
            if isinstance(v, torch.Tensor) and v.dim() > 0:
                assert v.device == torch.device("openreg:1")
