"""Where does a vectorized training step spend its time, and which batched-convolution formulation is fastest?

A measurement for deciding how `fedcore.client` should batch clients (DEVELOPERS.md, "Engine speed"): one
SGD step of `clients` clients, each on its own batch of B synthetic MNIST images, forward + backward, timed
with CUDA events (wall clock on a CPU) after warm-up. Variants:
  vmap        the engine today: vmap(grad(functional_call)) over the client dimension
  grouped     all clients as one convolution with groups=clients ([B, clients*C, H, W]), FC layers as bmm,
              autograd on the sum of the clients' losses (their gradients do not mix)
  grouped-cl  the same, channels-last
  unfold      convolutions as im2col (F.unfold) + one bmm per layer over the clients
Each is run with TF32 off and on (torch.backends.{cuda.matmul,cudnn}.allow_tf32), cudnn.benchmark on.
usage: python tools/engine_probe.py [--device cuda] [--clients 100] [--batch 50 10]
"""

import argparse
import time

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap

from fedcore import models
from fedcore import params as P


def conv_layers(model):
    return [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]


def stacked_forward(model, p, x, conv):
    """x: [c, B, C, H, W] -> logits [c, B, classes] for the conv-pool, conv-pool, FC... models."""
    c, B = x.shape[:2]
    names = [n for n, _ in model.named_parameters()]
    h = x
    convs = conv_layers(model)
    i = 0
    for layer in convs:
        w, b = p[names[i]], p[names[i + 1]]
        i += 2
        h = conv(h, w, b, layer.padding[0])  # [c, B, O, H', W']
        h = F.max_pool2d(torch.relu(h).flatten(0, 1), 2)
        h = h.unflatten(0, (c, B))
    h = h.flatten(2)  # [c, B, F]
    while i < len(names):
        w, b = p[names[i]], p[names[i + 1]]
        i += 2
        h = torch.baddbmm(b.unsqueeze(1), h, w.transpose(1, 2))
        if i < len(names):
            h = torch.relu(h)
    return h


def conv_grouped(channels_last):
    def conv(x, w, b, pad):
        c, B, C, H, W = x.shape
        xg = x.transpose(0, 1).reshape(B, c * C, H, W)
        if channels_last:
            xg = xg.contiguous(memory_format=torch.channels_last)
        out = F.conv2d(xg, w.flatten(0, 1), b.flatten(), padding=pad, groups=c)
        return out.unflatten(1, (c, -1)).transpose(0, 1)
    return conv


def conv_unfold(x, w, b, pad):
    c, B, C, H, W = x.shape
    O, k = w.shape[1], w.shape[-1]
    cols = F.unfold(x.flatten(0, 1), k, padding=pad)  # [c*B, C*k*k, L]
    L = cols.shape[-1]
    cols = cols.unflatten(0, (c, B)).permute(0, 2, 1, 3).reshape(c, C * k * k, B * L)
    out = torch.baddbmm(b.unsqueeze(-1), w.flatten(2), cols)  # [c, O, B*L]
    side = H + 2 * pad - k + 1
    return out.unflatten(2, (B, side, side)).transpose(1, 2)


def time_step(fn, device, iters):
    for _ in range(3):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(iters):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t) / iters


def probe(model_name, clients, B, device, iters):
    model = models.build(model_name).to(device)
    p = {k: v.detach().clone().requires_grad_(True) for k, v in P.broadcast(P.trainable(model), clients).items()}
    x = torch.randn(clients, B, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (clients, B), device=device)

    def loss_fn(pp, xx, yy):
        return F.cross_entropy(functional_call(model, pp, (xx,)), yy)

    vstep = vmap(grad(loss_fn))
    detached = {k: v.detach() for k, v in p.items()}

    def run_vmap():
        vstep(detached, x, y)

    def stacked(conv):
        def run():
            logits = stacked_forward(model, p, x, conv)
            loss = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(clients, B).mean(1)
            torch.autograd.grad(loss.sum(), list(p.values()))
        return run

    variants = {"vmap": run_vmap}
    if conv_layers(model):
        variants |= {"grouped": stacked(conv_grouped(False)), "grouped-cl": stacked(conv_grouped(True)),
                     "unfold": stacked(conv_unfold)}
    else:
        variants["stacked-bmm"] = stacked(None)
    for tf32 in (False, True):
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
        for name, fn in variants.items():
            try:
                s = time_step(fn, device, iters)
                print(f"{model_name:<15}{clients:>5}{B:>5}  {name:<12} tf32={int(tf32)}  {s * 1e3:8.2f} ms/step "
                      f"{clients * B / s:>12,.0f} samples/s", flush=True)
            except RuntimeError as exc:  # out of memory and the like: say so and go on
                print(f"{model_name:<15}{clients:>5}{B:>5}  {name:<12} tf32={int(tf32)}  failed: {str(exc)[:80]}")
                if device.type == "cuda":
                    torch.cuda.empty_cache()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--batch", type=int, nargs="+", default=[50, 10])
    ap.add_argument("--models", nargs="+", default=["fednnnn_mnist", "mcmahan_cnn", "mcmahan_2nn"])
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    for m in args.models:
        for B in args.batch:
            probe(m, args.clients, B, device, args.iters)


if __name__ == "__main__":
    main()
