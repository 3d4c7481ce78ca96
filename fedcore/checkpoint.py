"""Atomic checkpoints: round, algorithm state and history, enough to resume to identical numbers.

Every random draw in fedcore comes from a generator derived from (seed, purpose, round, client)
(fedcore.seeding), so the round number *is* the complete RNG state: a resumed run draws exactly what the
uninterrupted run would have drawn. A checkpoint also lists the segments of the run so far (which rounds
each process ran, on which machine and commit), since a run may be resumed elsewhere: in a later session,
on another machine, or on the CPU after an accelerator lease ran out.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from fedcore.config import with_defaults
from fedcore.errors import ConfigError
from fedcore.results import SEGMENT_KEYS, write_atomic

FORMAT = "fedcore.checkpoint/1"


def path_for(results_path: Path) -> Path:
    """Where the run that will write `results_path` keeps its checkpoint until it ends."""
    return results_path.with_name(results_path.name + ".ckpt")


def save(path: Path, *, config: dict, round: int, state, history: list, wall_s: float, segments: list) -> None:
    fields = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    payload = {"format": FORMAT, "config": config, "round": round, "state": fields,
               "history": history, "wall_s": wall_s, "segments": segments}
    write_atomic(path, lambda tmp: torch.save(payload, tmp))


def _read(path: Path, device) -> dict:
    try:
        payload = torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:  # truncated, not a torch file, or holding foreign objects
        raise ConfigError(f"checkpoint {path} is corrupt or not a fedcore checkpoint ({type(exc).__name__}); "
                          f"move it aside to start over") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ConfigError(f"checkpoint {path} is not a {FORMAT} file; move it aside to start over")
    if "segments" not in payload:  # written before fedcore recorded segments: only rounds and time are known
        payload["segments"] = [{**{k: "not recorded" for k in SEGMENT_KEYS}, "rounds": [0, payload["round"]],
                                "wall_s": round(payload["wall_s"], 3)}]
    return payload


def load(path: Path, *, config: dict, state_type, device: torch.device) -> dict:
    """The checkpoint's contents with `state` rebuilt; ConfigError if corrupt or for another config."""
    payload = _read(path, device)
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


def evaluations(path: Path) -> list[tuple[int, float]]:
    """(round, test accuracy) of every evaluation the checkpointed run has made so far."""
    return [(h["round"], h["test_acc"]) for h in _read(path, "cpu")["history"] if h.get("test_acc") is not None]


def describe(path: Path, *, brief: bool = False) -> str:
    """Where a checkpointed run stands: 'round R of N', then, unless brief, its time so far and the commit and
    machine that ran its last rounds (resume it at that commit, so that its results name the code)."""
    try:
        payload = _read(path, "cpu")
    except ConfigError as exc:
        return str(exc)
    where = f"round {payload['round']} of {payload['config']['rounds']}"
    if brief:
        return where
    last = payload["segments"][-1]
    return (f"{where}, {payload['wall_s']:.0f} s so far; last run at commit {last['git_commit'][:12]} on "
            f"{last['device_name']}")
