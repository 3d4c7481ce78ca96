"""Evaluation of a global model and the papers' rounds-to-target rules."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

from fedcore import params as P
from fedcore.data import Dataset

EVAL_BATCH = 5000


@torch.no_grad()
def evaluate(model: nn.Module, params: P.Params, buffers: P.Params, data: Dataset) -> tuple[float, float]:
    """(accuracy, mean cross-entropy) of the model on the whole test set, in eval mode."""
    model.eval()
    correct, loss = 0, 0.0
    for lo in range(0, len(data.test_y), EVAL_BATCH):
        x = data.normalize(data.test_x[lo:lo + EVAL_BATCH])
        y = data.test_y[lo:lo + EVAL_BATCH]
        logits = functional_call(model, {**params, **buffers}, (x,))
        loss += F.cross_entropy(logits, y, reduction="sum").item()
        correct += (logits.argmax(1) == y).sum().item()
    n = len(data.test_y)
    return correct / n, loss / n


def rounds_to_target_interpolated(rounds: list[int], accs: list[float], target: float) -> float | None:
    """McMahan et al.'s rule: make the curve monotone (running max), then interpolate linearly between
    evaluated rounds to where it first reaches the target. None if it never does."""
    best_prev, round_prev = -math.inf, None
    for r, a in zip(rounds, accs):
        best = max(best_prev, a)
        if best >= target:
            if round_prev is None or best_prev == -math.inf:
                return float(r)
            return round_prev + (target - best_prev) / (best - best_prev) * (r - round_prev)
        best_prev, round_prev = best, r
    return None


def first_round_at(rounds: list[int], accs: list[float], target: float) -> int | None:
    """FedUmf's rule: the first evaluated round whose accuracy is at or above the target."""
    return next((r for r, a in zip(rounds, accs) if a >= target), None)


def cannot_beat(evaluations: list[tuple[int, float]], target: float, rounds: float) -> bool:
    """True once a run still below `target` has been evaluated at or past round `rounds`: under either rule
    above it reaches the target only after its last evaluation, so it can never need fewer rounds than a
    run that needed `rounds` (McMahan's protocol keeps only an lr grid's fewest)."""
    return bool(evaluations) and max(a for _, a in evaluations) < target and evaluations[-1][0] >= rounds


def lr_grid_score(summary: dict, target: str | None, rule: str = "interpolated") -> tuple:
    """McMahan's protocol for a learning-rate grid (sec. 3): the best lr is the one that reaches the target
    in the fewest rounds; runs that never reach it rank below, by best accuracy. Larger is better.
    With no target (final-accuracy tables), the final accuracy decides."""
    if target is None:
        return (summary["final_acc"],)
    rounds = summary["rounds_to_target"].get(target, {}).get(rule)
    return (rounds is not None, -(rounds or 0), summary["best_acc"])
