"""Local client training: a vectorized cohort engine and the plain per-client reference it must match.

Semantics (both paths): each client starts from its own start point, runs E epochs over its own data,
reshuffled every epoch by its own generator, in minibatches of B (B=0: the whole local dataset; the last
partial batch is kept), with SGD (learning rate eta, weight decay lambda, optional momentum) on the
mean cross-entropy of the batch, plus optional terms an algorithm asks for:
  prox_mu/2 * ||w - anchor||^2      (FedProx's proximal term)
  <grad_shift, w>                    (a linear correction: SCAFFOLD, FedDyn, FedDC)
and, optionally, each step's gradient of that objective clipped to an L2 norm over all parameters (before
weight decay), as torch.nn.utils.clip_grad_norm_ does in the FedDyn and FedDC authors' code.
The engine knows nothing about federation: algorithms choose start points and read the results.

The fast path trains a chunk of clients at once: the papers' models through `fedcore.stacked` (every
client's weights in one batched forward pass), others with torch.func (vmap over grad of a functional call).
Clients of unequal size are trained exactly: at every step the active clients are grouped by their
current batch length, so no example is padded or dropped. BatchNorm layers use each client's own batch
statistics and update each client's own running statistics. On the CPU, convolutional models train
client after client through the plain loop instead, which is faster there (`auto_batching`).
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedcore import params as P
from fedcore import stacked
from fedcore.data import Dataset
from fedcore.errors import ConfigError

# Automatic chunk size: at most this many examples per vmapped call (bounds activation memory) and, on the
# CPU, at most this many parameter values per chunk: the SGD update streams every client's weights through
# memory each step, which is fastest while a chunk's weights stay in cache (measured on 2 cores: the 2NN at
# B=10 runs 1.4x faster in chunks of 20 clients than all 100 at once). A chunk never drops below
# AUTO_CHUNK_CPU_MIN_CLIENTS, below which batching stops paying for the CNNs.
AUTO_CHUNK_EXAMPLES = {"cpu": 8192, "cuda": 262144}
AUTO_CHUNK_CPU_PARAM_VALUES = 4_000_000
AUTO_CHUNK_CPU_MIN_CLIENTS = 4


@dataclass(frozen=True)
class LocalTraining:
    """One round's local training hyperparameters (McMahan et al.'s E, B, eta; plus lambda, momentum, mu)."""

    epochs: int  # E
    batch_size: int  # B; 0 means the whole local dataset (McMahan's B = inf)
    lr: float  # eta for this round
    weight_decay: float = 0.0  # lambda
    momentum: float = 0.0
    prox_mu: float = 0.0  # FedProx mu
    max_grad_norm: float = 0.0  # clip each step's gradient to this L2 norm (0: no clipping)

    def batch_len(self, n: int) -> int:
        return n if self.batch_size == 0 else min(self.batch_size, n)


@dataclass
class CohortResult:
    """Per-client outcome, stacked on a leading client dimension."""

    params: P.Params  # trainable parameters after local training
    buffers: P.Params  # BatchNorm running statistics (empty for models without buffers)
    num_examples: torch.Tensor  # n_k (CPU)
    train_loss: torch.Tensor  # mean minibatch cross-entropy over the client's local steps (CPU)
    steps: torch.Tensor  # local SGD steps taken, E * ceil(n_k / B) (CPU)


def epoch_orders(indices: torch.Tensor, epochs: int, generator: torch.Generator) -> torch.Tensor:
    """The client's dataset indices in training order: one fresh permutation per epoch, concatenated."""
    n = len(indices)
    perms = [torch.randperm(n, generator=generator) for _ in range(epochs)]
    return indices[torch.cat(perms).to(indices.device)]


def _loss(model: nn.Module, params, buffers, x, y, anchor, shift, prox_mu: float):
    """Local objective for one client; returns (objective, (cross-entropy, updated buffers))."""
    new_buffers = {k: v.clone() for k, v in buffers.items()}  # BatchNorm updates these in place
    ce = F.cross_entropy(functional_call(model, {**params, **new_buffers}, (x,)), y)
    objective = ce + _extra_terms(params, anchor, shift, prox_mu, torch.sum)
    return objective, (ce.detach(), new_buffers)


def _extra_terms(params, anchor, shift, prox_mu: float, total):
    """prox_mu/2 ||w - anchor||^2 + <shift, w>, the terms an algorithm adds to the local loss; `total` sums
    a tensor over one client (all of it under vmap, all but the client dimension when stacked)."""
    extra = 0.0
    if prox_mu:
        extra = extra + prox_mu / 2 * sum(total((params[k] - anchor[k]) ** 2) for k in params)
    if shift is not None:
        extra = extra + sum(total(shift[k] * params[k]) for k in params)
    return extra


def _stacked_step(model: nn.Module, prox_mu: float, params, buffers, x, y, anchor, shift):
    """Every client's gradient of its local objective at once; the same contract as the vmapped `_loss`."""
    p = {k: v.detach().requires_grad_() for k, v in params.items()}
    logits, new_buffers = stacked.forward(model, p, buffers, x)
    c, L = y.shape
    ce = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(c, L).mean(1)
    objective = ce + _extra_terms(p, anchor, shift, prox_mu, lambda t: t.flatten(1).sum(1))
    grads = torch.autograd.grad(objective.sum(), list(p.values()))  # clients' gradients do not mix
    return dict(zip(p, grads)), (ce.detach(), new_buffers)


def _sgd_update(p: P.Params, g: P.Params, mom: P.Params | None, cfg: LocalTraining) -> None:
    """In-place torch.optim.SGD step (dampening 0, no Nesterov) on stacked tensors.

    Fused _foreach ops: with a whole cohort's weights in memory this update is bandwidth-bound.
    """
    params, grads = list(p.values()), list(g.values())
    if cfg.max_grad_norm:  # per client, as clip_grad_norm_: coef = min(1, max_norm / (||g|| + 1e-6))
        norms = torch.sqrt(sum((v ** 2).reshape(v.shape[0], -1).sum(1) for v in grads))
        coef = torch.clamp(cfg.max_grad_norm / (norms + 1e-6), max=1.0)
        grads = [v * coef.view(-1, *[1] * (v.dim() - 1)).to(v.dtype) for v in grads]
    if cfg.weight_decay:
        torch._foreach_add_(grads, params, alpha=cfg.weight_decay)
    if mom is not None:
        bufs = list(mom.values())
        torch._foreach_mul_(bufs, cfg.momentum)  # starts at zero, so the first step equals torch's buf = d
        torch._foreach_add_(bufs, grads)
        grads = bufs
    torch._foreach_add_(params, grads, alpha=-cfg.lr)


BATCHINGS = ("stacked", "vmap", "loop")


def auto_batching(model: nn.Module, device: torch.device) -> str:
    """On CUDA, stacked where the model allows it (an H100: 1.1-2.6x vmap), else vmap. On the CPU, the plain
    loop for models with convolutions (vmap's and stacked's grouped convolutions are slower there than one
    client's own: the loop measured 1.06-1.7x vmap), else vmap (the 2NN: 2.6-3.5x the loop). DEVELOPERS.md,
    "Engine speed"."""
    if device.type == "cuda":
        return "stacked" if stacked.supports(model) else "vmap"
    return "loop" if any(isinstance(m, nn.Conv2d) for m in model.modules()) else "vmap"


def train_cohort(model: nn.Module, start: P.Params, start_buffers: P.Params, client_indices: list[torch.Tensor],
                 data: Dataset, cfg: LocalTraining, generators: list[torch.Generator], *,
                 anchor: P.Params | None = None, grad_shift: P.Params | None = None,
                 client_chunk: int = 0, batching: str = "auto") -> CohortResult:
    """Train every client of a cohort; `start`, `start_buffers`, `anchor`, `grad_shift` are stacked [m, ...].

    `client_chunk` clients are trained at once (0: automatic, see AUTO_CHUNK_*); chunks run one after
    another, so memory stays bounded whatever the cohort size. `batching` says how a chunk's gradients are
    taken: "stacked" (fedcore.stacked), "vmap" (torch.func), "loop" (one client at a time through
    `train_client_reference`; no chunks), or "auto" (`auto_batching`).
    """
    m = len(client_indices)
    sizes = [len(ix) for ix in client_indices]
    if min(sizes) == 0:
        raise ConfigError("a client has no training examples; use fewer --clients or another --partition")
    if batching == "auto":
        batching = auto_batching(model, data.train_x.device)
    elif batching not in BATCHINGS or (batching == "stacked" and not stacked.supports(model)):
        raise ConfigError(f"batching must be auto, vmap, loop or stacked (for nn.Sequential models of the "
                          f"layers fedcore.stacked knows); got {batching!r}")
    if cfg.prox_mu and anchor is None:
        anchor = start  # FedProx's anchor is the model the client received
    if batching == "loop":
        return _train_one_by_one(model, start, start_buffers, client_indices, data, cfg, generators, anchor,
                                 grad_shift)
    if client_chunk <= 0:
        on_cuda = data.train_x.is_cuda
        client_chunk = AUTO_CHUNK_EXAMPLES["cuda" if on_cuda else "cpu"] // cfg.batch_len(max(sizes))
        if not on_cuda:
            by_params = AUTO_CHUNK_CPU_PARAM_VALUES // sum(v[0].numel() for v in start.values())
            client_chunk = min(client_chunk, max(by_params, AUTO_CHUNK_CPU_MIN_CLIENTS))
        client_chunk = max(1, client_chunk)
    model.train()
    outs = []
    for lo in range(0, m, client_chunk):
        sl = slice(lo, min(lo + client_chunk, m))
        outs.append(_train_chunk(
            model, {k: v[sl] for k, v in start.items()}, {k: v[sl] for k, v in start_buffers.items()},
            client_indices[sl], data, cfg, generators[sl],
            None if anchor is None else {k: v[sl] for k, v in anchor.items()},
            None if grad_shift is None else {k: v[sl] for k, v in grad_shift.items()}, batching))
    cat = lambda key: {k: torch.cat([o[key][k] for o in outs]) for k in outs[0][key]}  # noqa: E731
    return CohortResult(cat("params"), cat("buffers"), torch.tensor(sizes),
                        torch.cat([o["loss"] for o in outs]).cpu(), torch.cat([o["steps"] for o in outs]).cpu())


def _train_one_by_one(model, start, start_buffers, client_indices, data, cfg, generators, anchor, shift
                      ) -> CohortResult:
    """The cohort client after client through the plain loop, on a copy of the model (it loads weights)."""
    local = copy.deepcopy(model)
    row = lambda stacked_params, i: None if stacked_params is None else P.row(stacked_params, i)  # noqa: E731
    outs = [train_client_reference(local, P.row(start, i), P.row(start_buffers, i), ix, data, cfg, g,
                                   anchor=row(anchor, i), grad_shift=row(shift, i))
            for i, (ix, g) in enumerate(zip(client_indices, generators))]
    sizes = [len(ix) for ix in client_indices]
    return CohortResult(P.stack([o[0] for o in outs]), P.stack([o[1] for o in outs]), torch.tensor(sizes),
                        torch.tensor([o[2] for o in outs]),
                        torch.tensor([cfg.epochs * -(-n // cfg.batch_len(n)) for n in sizes]))


def _train_chunk(model, start, start_buffers, client_indices, data, cfg, generators, anchor, shift, batching) -> dict:
    c = len(client_indices)
    device = data.train_x.device
    # The step schedule (who is active, with which batch length) is planned on the CPU: deciding it from
    # GPU tensors would make the host wait for the GPU at every step, and the two would never overlap.
    n_cpu = torch.tensor([len(ix) for ix in client_indices])
    blen_cpu = n_cpu if cfg.batch_size == 0 else torch.clamp(n_cpu, max=cfg.batch_size)
    steps_per_epoch_cpu = (n_cpu + blen_cpu - 1) // blen_cpu
    total_steps = cfg.epochs * steps_per_epoch_cpu
    n, blen, steps_per_epoch = (t.to(device) for t in (n_cpu, blen_cpu, steps_per_epoch_cpu))
    offsets = torch.arange(int(blen_cpu.max()), device=device)

    orders = [epoch_orders(ix.to(device), cfg.epochs, g) for ix, g in zip(client_indices, generators)]
    order_mat = torch.nn.utils.rnn.pad_sequence(orders, batch_first=True)  # [c, E * max n_k]

    p = {k: v.clone() for k, v in start.items()}
    b = {k: v.clone() for k, v in start_buffers.items()}
    mom = P.zeros_like(p) if cfg.momentum else None
    loss_sum = torch.zeros(c, dtype=torch.float64, device=device)
    zero_anchor = anchor is None
    if batching == "stacked":
        step_fn = functools.partial(_stacked_step, model, cfg.prox_mu)
    else:
        step_fn = vmap(grad(lambda pp, bb, x, y, a, s: _loss(model, pp, bb, x, y, a, s, cfg.prox_mu), has_aux=True),
                       in_dims=(0, 0, 0, 0, None if zero_anchor else 0, None if shift is None else 0))
    everyone = torch.arange(c)
    for s in range(int(total_steps.max())):
        active = s < total_steps
        j_cpu = s % steps_per_epoch_cpu
        length = torch.minimum(blen_cpu, n_cpu - j_cpu * blen_cpu)
        start_pos = (s // steps_per_epoch) * n + (s % steps_per_epoch) * blen
        for L in torch.unique(length[active]).tolist():
            members_cpu = everyone[active & (length == L)]
            whole = len(members_cpu) == c
            members = members_cpu.to(device, non_blocking=True)  # from pageable memory: no wait for the GPU
            rows = order_mat[members[:, None], start_pos[members, None] + offsets[:L]]
            x, y = data.normalize(data.train_x[rows]), data.train_y[rows]
            pg = p if whole else P.select(p, members)
            bg = b if whole else P.select(b, members)
            ag = {} if zero_anchor else (anchor if whole else P.select(anchor, members))
            sg = None if shift is None else (shift if whole else P.select(shift, members))
            g, (ce, new_b) = step_fn(pg, bg, x, y, ag, sg)
            mg = None if mom is None else (mom if whole else P.select(mom, members))
            _sgd_update(pg, g, mg, cfg)
            loss_sum[members] += ce.double()
            if whole:
                b = new_b
            else:
                for k in p:
                    p[k][members] = pg[k]
                    if mom is not None:
                        mom[k][members] = mg[k]
                for k in b:
                    b[k][members] = new_b[k]
    return {"params": p, "buffers": b, "loss": (loss_sum / total_steps.to(device)).float(), "steps": total_steps}


def train_client_reference(model: nn.Module, start: P.Params, start_buffers: P.Params, indices: torch.Tensor,
                           data: Dataset, cfg: LocalTraining, generator: torch.Generator, *,
                           anchor: P.Params | None = None, grad_shift: P.Params | None = None
                           ) -> tuple[P.Params, P.Params, float]:
    """The plain loop with torch.optim.SGD that `train_cohort` must reproduce, one client at a time."""
    model.load_state_dict({**start, **start_buffers})
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    anchor = start if anchor is None else anchor
    order = epoch_orders(indices.to(data.train_x.device), cfg.epochs, generator)
    n, blen = len(indices), cfg.batch_len(len(indices))
    losses = []
    for e in range(cfg.epochs):
        epoch_order = order[e * n:(e + 1) * n]
        for lo in range(0, n, blen):
            rows = epoch_order[lo:lo + blen]
            ce = F.cross_entropy(model(data.normalize(data.train_x[rows])), data.train_y[rows])
            objective = ce
            named = dict(model.named_parameters())
            if cfg.prox_mu:
                objective = objective + cfg.prox_mu / 2 * sum(((named[k] - anchor[k]) ** 2).sum() for k in named)
            if grad_shift is not None:
                objective = objective + sum((grad_shift[k] * named[k]).sum() for k in named)
            opt.zero_grad()
            objective.backward()
            if cfg.max_grad_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
            opt.step()
            losses.append(ce.item())
    return P.trainable(model), P.buffers(model), sum(losses) / len(losses)
