"""The papers' networks. `build(name)` returns a freshly initialised `nn.Module`.

Parameter counts (asserted in tests/test_models.py):
  mcmahan_2nn    199,210   McMahan et al. 2017, sec. 3: MLP 784-200-200-10, ReLU.
  mcmahan_cnn  1,663,370   McMahan et al. 2017, sec. 3: 5x5 conv 32, 2x2 pool, 5x5 conv 64, 2x2 pool,
                           FC 512, softmax 10. The count is exact only with SAME padding (28 -> 14 -> 7).
  fednnnn_mnist  431,080   FedNNNN Table 3 (LeNet-like: conv 20, conv 50, FC 500, FC 10; VALID padding).
  fednnnn_cifar 1,146,088  FedNNNN Table 4: six 3x3 conv + BatchNorm, FC 382-192-10. The table prints 382
                           (not 384) for Fc1, and the stated count matches 382, so we keep it.
  fedumf_fcn               FedUmf appendix (after FedDyn): two hidden layers of 100 units on MNIST.
  fedumf_cnn               FedUmf appendix (after FedDyn): two 5x5 conv layers of 64, FC 384, FC 192.
  resnet18                 ResNet-18 (He et al. 2016) with the usual 32x32 stem: 3x3 conv, no max-pool.
"""

from __future__ import annotations

import torch
from torch import nn

from fedcore.errors import ConfigError

# (channels, height, width) each model is built for unless told otherwise.
DEFAULT_INPUT_SHAPE = {
    "mcmahan_2nn": (1, 28, 28),
    "mcmahan_cnn": (1, 28, 28),
    "fednnnn_mnist": (1, 28, 28),
    "fednnnn_cifar": (3, 32, 32),
    "fedumf_fcn": (1, 28, 28),
    "fedumf_cnn": (3, 32, 32),
    "resnet18": (3, 32, 32),
}
MODEL_NAMES = tuple(DEFAULT_INPUT_SHAPE)


def _mlp(in_features: int, hidden: int, num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(in_features, hidden), nn.ReLU(),
        nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, num_classes),
    )


def _conv_pool(c_in: int, c_out: int, k: int, padding: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, k, padding=padding), nn.ReLU(), nn.MaxPool2d(2)]


def _conv_bn(c_in: int, c_out: int) -> list[nn.Module]:
    return [nn.Conv2d(c_in, c_out, 3, padding=1), nn.BatchNorm2d(c_out), nn.ReLU()]


def _two_conv_two_fc(c: int, h: int, w: int, convs: tuple[int, int], k: int, padding: int,
                     fcs: tuple[int, ...], num_classes: int) -> nn.Module:
    """conv-pool, conv-pool, then fully connected layers: the shape of four of the papers' CNNs."""
    layers = _conv_pool(c, convs[0], k, padding) + _conv_pool(convs[0], convs[1], k, padding)
    for _ in range(2):
        h, w = (h + 2 * padding - k + 1) // 2, (w + 2 * padding - k + 1) // 2
    widths = (convs[1] * h * w, *fcs)
    layers.append(nn.Flatten())
    for a, b in zip(widths, widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], num_classes))
    return nn.Sequential(*layers)


def _fednnnn_cifar(c: int, h: int, w: int, num_classes: int) -> nn.Module:
    layers: list[nn.Module] = []
    for c_in, c_out in ((c, 32), (32, 64), (64, 128)):
        layers += _conv_bn(c_in, c_out) + _conv_bn(c_out, c_out) + [nn.MaxPool2d(2)]
    layers += [nn.Flatten(), nn.Linear(128 * (h // 8) * (w // 8), 382), nn.ReLU(),
               nn.Linear(382, 192), nn.ReLU(), nn.Linear(192, num_classes)]
    return nn.Sequential(*layers)


class _BasicBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.shortcut = nn.Sequential()
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(self.bn2(self.conv2(out)) + self.shortcut(x))


def _resnet18(c: int, num_classes: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Conv2d(c, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    c_in = 64
    for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_BasicBlock(c_in, c_out, stride), _BasicBlock(c_out, c_out, 1)]
        c_in = c_out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes)]
    return nn.Sequential(*layers)


def build(name: str, num_classes: int = 10, input_shape: tuple[int, int, int] | None = None) -> nn.Module:
    """A new model `name` for inputs of shape (C, H, W) (the model's usual shape by default)."""
    if name not in DEFAULT_INPUT_SHAPE:
        raise ConfigError(f"--model must be one of {', '.join(MODEL_NAMES)}; got {name!r}")
    c, h, w = input_shape or DEFAULT_INPUT_SHAPE[name]
    if name == "mcmahan_2nn":
        return _mlp(c * h * w, 200, num_classes)
    if name == "fedumf_fcn":
        return _mlp(c * h * w, 100, num_classes)
    if name == "mcmahan_cnn":
        return _two_conv_two_fc(c, h, w, (32, 64), 5, 2, (512,), num_classes)
    if name == "fednnnn_mnist":
        return _two_conv_two_fc(c, h, w, (20, 50), 5, 0, (500,), num_classes)
    if name == "fedumf_cnn":
        return _two_conv_two_fc(c, h, w, (64, 64), 5, 0, (384, 192), num_classes)
    if name == "fednnnn_cifar":
        return _fednnnn_cifar(c, h, w, num_classes)
    return _resnet18(c, num_classes)


def num_trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def layer_kind(module: nn.Module) -> str:
    """'conv', 'fc' or 'norm': the groups FedNNNN's appendix plots N and E for."""
    if isinstance(module, nn.Conv2d):
        return "conv"
    if isinstance(module, nn.Linear):
        return "fc"
    return "norm"


def layer_groups(model: nn.Module) -> dict[str, tuple[str, str]]:
    """Trainable parameter name -> (layer label, kind): conv1, conv2, ..., fc1, ..., norm1, ... in forward
    order, so per-layer N/E plots read like the papers' architecture tables."""
    counts: dict[str, int] = {}
    groups = {}
    for module_name, module in model.named_modules():
        own = list(module.named_parameters(recurse=False))
        if not own:
            continue
        kind = layer_kind(module)
        counts[kind] = counts.get(kind, 0) + 1
        for pname, _ in own:
            groups[f"{module_name}.{pname}" if module_name else pname] = (f"{kind}{counts[kind]}", kind)
    return groups
