"""Atomic checkpoints: round, algorithm state and history, enough to resume to identical numbers.

Every random draw in fedcore comes from a generator derived from (seed, purpose, round, client)
(fedcore.seeding), so the round number *is* the complete RNG state: a resumed run draws exactly what the
uninterrupted run would have drawn.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from fedcore.config import with_defaults
from fedcore.errors import ConfigError
from fedcore.results import write_atomic

FORMAT = "fedcore.checkpoint/1"


def save(path: Path, *, config: dict, round: int, state, history: list, wall_s: float) -> None:
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    payload = {"format": FORMAT, "config": config, "round": round, "state": fields,
               "history": history, "wall_s": wall_s}
    write_atomic(path, lambda tmp: torch.save(payload, tmp))


def load(path: Path, *, config: dict, state_type, device: torch.device) -> dict:
    """The checkpoint's contents with `state` rebuilt; ConfigError if corrupt or for another config."""
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # truncated, not a torch file, or holding foreign objects
        raise ConfigError(f"checkpoint {path} is corrupt or not a fedcore checkpoint ({type(exc).__name__}); "
                          f"move it aside to start over") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ConfigError(f"checkpoint {path} is not a {FORMAT} file; move it aside to start over")
    payload["config"] = with_defaults(payload["config"])
    if payload["config"] != config:
        changed = sorted(k for k in set(config) | set(payload["config"])
                         if config.get(k) != payload["config"].get(k))
        raise ConfigError(f"checkpoint {path} was written for a different config (differs in: "
                          f"{', '.join(changed)}); move it aside or choose another --out")
    try:
        payload["state"] = state_type(**payload["state"])
    except TypeError as exc:
        raise ConfigError(f"checkpoint {path} holds a state this version cannot read ({exc})") from None
    return payload
