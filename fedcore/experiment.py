"""The run loop: data, partition, model, then T rounds of (sample clients, algorithm round, evaluate).

`run(cfg, runtime)` returns the results dict (see fedcore.results) and writes it to `runtime.out`.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm

from fedcore import aggregators, algorithms, checkpoint, data, metrics, models, partition, results, seeding
from fedcore import params as P
from fedcore.client import LocalTraining, train_cohort
from fedcore.config import GridLeader, RunConfig, Runtime
from fedcore.errors import ConfigError, RunInterrupted


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available; use --device cpu or auto")
    return torch.device(name)


def config_hash(cfg: RunConfig) -> str:
    return hashlib.sha256(json.dumps(cfg.to_dict(), sort_keys=True).encode()).hexdigest()[:12]


def default_out(cfg: RunConfig) -> Path:
    return Path("runs") / f"{cfg.algorithm}-{cfg.model}-{cfg.partition}-{config_hash(cfg)}.json"


def sample_clients(cfg: RunConfig, t: int) -> torch.Tensor:
    """S_t: m = max(C*K, 1) distinct clients, uniformly at random, from round t's own generator."""
    g = seeding.generator(cfg.seed, "client_sampling", t)
    return torch.randperm(cfg.clients, generator=g)[:cfg.clients_per_round].sort().values


def setup(cfg: RunConfig, device: torch.device):
    """(dataset on device, client index tensors on device, freshly initialised model) for `cfg`."""
    ds = data.scaled(data.load(cfg.dataset), cfg.inputs)
    if cfg.train_subset or cfg.test_subset:
        ds = data.subset(ds, cfg.train_subset, cfg.test_subset, seeding.generator(cfg.seed, "subset"))
    parts = partition.make(cfg.partition, ds.train_y, cfg.clients,
                           generator=seeding.generator(cfg.seed, "partition"), **cfg.partition_params())
    with seeding.seeded_global_rng(seeding.derive_seed(cfg.seed, "model_init")):
        model = models.build(cfg.model, ds.num_classes, ds.input_shape)
    return ds.to(device), [ix.to(device) for ix in parts], model.to(device)


def _upload_noise(cfg: RunConfig, t: int, stacked: P.Params) -> P.Params:
    """w^k + N(0, sigma^2) for every uploaded client model (replication poster sec. 2.4); a no-op at 0."""
    if cfg.noise_std == 0:
        return stacked
    g = seeding.generator(cfg.seed, "noise", t)
    return {k: v + cfg.noise_std * torch.randn(v.shape, generator=g).to(v.device) for k, v in stacked.items()}


def _round_metrics(rep: algorithms.RoundReport, server_step: P.Params, groups: dict) -> dict:
    """The round record's measurements: train loss, work done, and FedNNNN's NWDA instruments."""
    N, E = aggregators.nwda(rep.deltas, rep.weights)
    return {"train_loss": rep.train_loss, "client_computations": rep.client_computations,
            "N": float(N), "E": float(E), "server_step": float(P.norm(server_step)),
            **aggregators.nwda_by_group(rep.deltas, rep.weights, server_step, groups), **rep.extra}


def _evaluations(history: list[dict]) -> list[tuple[int, float]]:
    return [(r["round"], r["test_acc"]) for r in history if r["test_acc"] is not None]


def _all_targets_reached(cfg: RunConfig, history: list[dict]) -> bool:
    return max((a for _, a in _evaluations(history)), default=0.0) >= max(cfg.target_acc)


def _diverged(record: dict) -> bool:
    return not math.isfinite(record.get("server_step", 0.0))


def _summary(cfg: RunConfig, history: list[dict], wall_s: float, beaten_by: GridLeader | None) -> dict:
    rounds, accs = map(list, zip(*_evaluations(history)))
    diverged = _diverged(history[-1])
    return {
        "final_acc": accs[-1],
        "best_acc": max(accs),
        "rounds_to_target": {
            f"{a:g}": {"interpolated": metrics.rounds_to_target_interpolated(rounds, accs, a),
                       "first_round": metrics.first_round_at(rounds, accs, a)}
            for a in cfg.target_acc},
        "rounds_completed": history[-1]["round"],
        "stopped_at_target": (cfg.stop_at_target and history[-1]["round"] < cfg.rounds and not diverged
                              and beaten_by is None),
        "diverged_at_round": history[-1]["round"] if diverged else None,
        "beaten_by": None if beaten_by is None else {"run": beaten_by.run, "rounds": beaten_by.rounds},
        "client_computations": sum(r.get("client_computations", 0) for r in history),
        "total_wall_s": round(wall_s, 3),
    }


def run(cfg: RunConfig, runtime: Runtime = Runtime()) -> dict:
    # Subnormal floats (tiny control variates and drifts in SCAFFOLD/FedDC) make CPU arithmetic up to 7x
    # slower (FedDC on MNIST: 17 s vs 2.4 s for 3 rounds); flushing them to zero costs no accuracy. The
    # flag is process-wide (it also changes numpy), so it is set for the run only.
    torch.set_flush_denormal(True)
    try:
        return _run(cfg, runtime)
    finally:
        torch.set_flush_denormal(False)


def _run(cfg: RunConfig, runtime: Runtime) -> dict:
    device = resolve_device(runtime.device)
    out = Path(runtime.out) if runtime.out else default_out(cfg)
    results.check_writable(out)
    ckpt_path = checkpoint.path_for(out)
    if ckpt_path.exists() and not runtime.resume:
        raise ConfigError(f"a checkpoint from an earlier run exists at {ckpt_path}; pass --resume to continue "
                          f"it or remove it to start over")

    ds, parts, model = setup(cfg, device)
    groups = models.layer_groups(model)
    algo = algorithms.make(cfg)
    state = algo.init(P.trainable(model), P.buffers(model), cfg.clients)
    env = {**results.env_info(device), "parallel_runs": runtime.parallel_runs}
    history: list[dict] = []
    start_round, wall_before, earlier_segments = 0, 0.0, []
    if runtime.resume and ckpt_path.exists():
        saved = checkpoint.load(ckpt_path, config=cfg.to_dict(), state_type=type(state), device=device)
        state, history, start_round, wall_before = saved["state"], saved["history"], saved["round"], saved["wall_s"]
        earlier_segments = saved["segments"]
    t0 = time.perf_counter()
    elapsed = lambda: wall_before + time.perf_counter() - t0  # noqa: E731

    def segments(last_round: int) -> list[dict]:
        """The run's segments up to `last_round`: the earlier processes', then this one's if it ran a round."""
        first = start_round + 1 if earlier_segments else 0
        this = {**{k: env[k] for k in results.SEGMENT_KEYS}, "rounds": [first, last_round],
                "wall_s": round(time.perf_counter() - t0, 3)}
        return earlier_segments + ([this] if last_round >= first else [])

    def save_checkpoint(last_round: int, state, history: list[dict]) -> None:
        segs = segments(last_round)  # timed before the total, so the segments never add up to more than it
        checkpoint.save(ckpt_path, config=cfg.to_dict(), round=last_round, state=state, history=history,
                        wall_s=elapsed(), segments=segs)

    def evaluate_into(record: dict, state) -> None:
        done = {}  # algorithms whose evaluated and distributed models coincide are evaluated once
        for label, (p, b) in algo.eval_models(state).items():
            if id(p) not in done:
                done[id(p)] = metrics.evaluate(model, p, b, ds)
            suffix = label[len("test"):]  # "test" -> "", "test_distributed" -> "_distributed"
            record[f"test_acc{suffix}"], record[f"test_loss{suffix}"] = done[id(p)]

    if start_round == 0:
        record = {"round": 0, "test_acc": None, "test_loss": None, "train_loss": None}
        evaluate_into(record, state)
        history.append({**record, "wall_s": round(elapsed(), 3)})
    committed_round, beaten_by = history[-1]["round"], None
    integral = history[-1].get("server_step_integral", 0.0)

    bar = tqdm(range(start_round + 1, cfg.rounds + 1), initial=start_round, total=cfg.rounds,
               disable=not runtime.progress, desc=out.stem,
               position=runtime.progress_line, unit="round", leave=False)
    try:
        for t in bar:
            # a losing lr of a grid ends once the table can no longer pick it
            leader = runtime.leader() if runtime.leader else None
            if leader and metrics.cannot_beat(_evaluations(history), leader.target, leader.rounds):
                beaten_by = leader
                break
            lr_t = cfg.lr * cfg.lr_decay ** (t - 1)
            local = LocalTraining(cfg.local_epochs, cfg.batch_size, lr_t, cfg.weight_decay, cfg.momentum,
                                  max_grad_norm=cfg.max_grad_norm)

            def train(start, start_buffers, ids, anchor=None, grad_shift=None, prox_mu=0.0):
                ids = ids.tolist()
                gens = [seeding.generator(cfg.seed, "client_batches", t, i) for i in ids]
                with torch.autocast(ds.train_x.device.type, dtype=torch.bfloat16, enabled=cfg.precision == "bf16"):
                    return train_cohort(model, start, start_buffers, [parts[i] for i in ids], ds,
                                        dataclasses.replace(local, prox_mu=prox_mu), gens,
                                        anchor=anchor, grad_shift=grad_shift, client_chunk=runtime.client_chunk)

            inputs = algorithms.RoundInputs(t, lr_t, lr_t / cfg.lr_decay if t > 1 else lr_t,
                                            sample_clients(cfg, t), cfg.clients, cfg.weighting, train,
                                            functools.partial(_upload_noise, cfg, t))
            new_state, rep = algo.run_round(state, inputs)
            round_metrics = _round_metrics(rep, P.sub(new_state.params, state.params), groups)
            integral += round_metrics["server_step"]
            round_metrics["server_step_integral"] = integral
            record = {"round": t, "test_acc": None, "test_loss": None, **round_metrics}
            # NaN or infinite weights never recover under SGD: the rest of the run would only repeat chance
            # accuracy (an lr grid's too-large rates), so it ends here, evaluated, and says so
            diverged = _diverged(record)
            if t % cfg.eval_every == 0 or t == cfg.rounds or diverged:
                evaluate_into(record, new_state)
                bar.set_postfix(acc=f"{record['test_acc']:.4f}")
            record["wall_s"] = round(elapsed(), 3)
            history.append(record)
            state, committed_round = new_state, t
            if diverged or (cfg.stop_at_target and _all_targets_reached(cfg, history)):
                break
            if runtime.checkpoint_every and t % runtime.checkpoint_every == 0 and t < cfg.rounds:
                save_checkpoint(t, state, history)
    except KeyboardInterrupt:
        history = [r for r in history if r["round"] <= committed_round]  # drop a half-recorded round
        save_checkpoint(committed_round, state, history)
        raise RunInterrupted(committed_round, ckpt_path) from None
    finally:
        bar.close()

    if earlier_segments:  # resumed: env alone would name only the machine and commit of the last segment
        env["segments"] = segments(committed_round)
    doc = {"schema": results.SCHEMA, "config": cfg.to_dict(), "env": env, "rounds": history,
           "summary": _summary(cfg, history, elapsed(), beaten_by)}
    results.write_json_atomic(out, doc)
    ckpt_path.unlink(missing_ok=True)
    doc["path"] = str(out)
    return doc
