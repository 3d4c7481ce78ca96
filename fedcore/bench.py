"""Engine benchmark: client-samples/s of the vectorized cohort engine vs the plain per-client loop.

Both paths train the same cohort (same start, data, batch order) on synthetic MNIST-shaped uint8 images:
speed does not depend on pixel values, and the benchmark then needs no dataset on disk. Prints a table
with the ratio and the target (issue: >= 2x for the 2NN and >= 1x for the CNNs on a 2-core CPU; >= 20x
on an accelerator). Timings are wall-clock, best of `repeats`, after one warm-up. Where the engine's
automatic batching is not vmap (stacked on CUDA, the plain loop for CNNs on the CPU) vmap is timed on the
same cohort too: the evidence for that choice.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from fedcore import models, results
from fedcore import params as P
from fedcore.client import LocalTraining, auto_batching, train_client_reference, train_cohort
from fedcore.data import STATS, Dataset
from fedcore.experiment import resolve_device


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    clients: int  # cohort size on the CPU; an accelerator always trains GPU_CLIENTS
    batch_size: int
    examples_per_client: int = 600  # MNIST over 100 clients
    epochs: int = 1
    cpu_target: float = 1.0
    gpu_only: bool = False  # B=50 is what the FedNNNN and FedUmf tables use; on 2 CPU cores it is no news


CASES = (
    Case("mcmahan_2nn B=10", "mcmahan_2nn", 100, 10, cpu_target=2.0),
    Case("mcmahan_2nn B=50", "mcmahan_2nn", 100, 50, cpu_target=2.0),
    Case("mcmahan_cnn B=10", "mcmahan_cnn", 10, 10),
    Case("mcmahan_cnn B=50", "mcmahan_cnn", 10, 50),
    Case("mcmahan_cnn B=inf", "mcmahan_cnn", 10, 0),  # FedSGD and the B = inf cells: one 600-example batch
    Case("fednnnn_mnist B=10", "fednnnn_mnist", 10, 10),
    Case("fednnnn_mnist B=50", "fednnnn_mnist", 10, 50, gpu_only=True),
)
GPU_TARGET = 20.0
# On an accelerator the engine trains a paper-sized cohort (100 clients, as every MNIST table), while the
# plain loop, whose time grows linearly with the clients, is timed on GPU_LOOP_CLIENTS of them.
GPU_CLIENTS, GPU_LOOP_CLIENTS = 100, 10


def _synthetic_mnist(n: int, device: torch.device) -> Dataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (n, 1, 28, 28), generator=g, dtype=torch.uint8)
    y = torch.randint(0, 10, (n,), generator=g)
    mean, std = (torch.tensor(s).view(1, -1, 1, 1) for s in STATS["mnist"])
    return Dataset("synthetic-mnist", x, y, x[:1], y[:1], mean, std).to(device)


def _best_time(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up: allocator, kernels, vmap tracing caches
    best = float("inf")
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def _cohort(case: Case, device: torch.device):
    clients, loop_clients = (GPU_CLIENTS, GPU_LOOP_CLIENTS) if device.type == "cuda" else (case.clients,) * 2
    n = clients * case.examples_per_client
    data = _synthetic_mnist(n, device)
    model = models.build(case.model).to(device)
    parts = list(torch.arange(n, device=device).split(case.examples_per_client))
    cfg = LocalTraining(case.epochs, case.batch_size, lr=0.01)
    start, start_b = P.broadcast(P.trainable(model), clients), P.broadcast(P.buffers(model), clients)
    gens = lambda: [torch.Generator().manual_seed(i) for i in range(clients)]  # noqa: E731

    auto = auto_batching(model, device)

    def vectorized(batching: str = auto):
        train_cohort(model, start, start_b, parts, data, cfg, gens(), batching=batching)

    def plain_loop():
        for i, (ix, g) in enumerate(zip(parts[:loop_clients], gens())):
            train_client_reference(model, P.row(start, i), P.row(start_b, i), ix, data, cfg, g)

    return vectorized, plain_loop, clients, loop_clients, auto


def _samples_per_s(case: Case, clients: int, seconds: float) -> float:
    """Client-samples/s: `clients` each training E epochs over their examples in `seconds`."""
    return clients * case.examples_per_client * case.epochs / seconds


def _save(out: Path | None, env: dict, repeats: int, key: str, rows: list) -> None:
    if out:
        results.write_json_atomic(Path(out), {"env": env, "repeats": repeats, key: rows})
        print(f"written to {out}")


def run_case(case: Case, device: torch.device, repeats: int) -> dict:
    vectorized, plain_loop, clients, loop_clients, batching = _cohort(case, device)
    vec_rate = _samples_per_s(case, clients, _best_time(vectorized, repeats, device))
    loop_rate = _samples_per_s(case, loop_clients, _best_time(plain_loop, repeats, device))
    target = GPU_TARGET if device.type == "cuda" else case.cpu_target
    row = {"case": case.name, "clients": clients, "loop_clients": loop_clients, "batch_size": case.batch_size,
           "batching": batching, "vectorized_samples_per_s": vec_rate, "loop_samples_per_s": loop_rate,
           "ratio": vec_rate / loop_rate, "target": target}
    if batching != "vmap":  # the evidence for the choice: the other batching on the same cohort
        t_vmap = _best_time(lambda: vectorized("vmap"), repeats, device)
        row["vmap_samples_per_s"] = _samples_per_s(case, clients, t_vmap)
    return row


def _cases(device: torch.device, only: list[str] | None) -> list[Case]:
    return [c for c in CASES if (device.type == "cuda" or not c.gpu_only)
            and (not only or any(o in c.name for o in only))]


def profile(device: torch.device, only: list[str] | None = None, rows: int = 25) -> None:
    """torch.profiler's table of the operators that take the most time in one vectorized cohort per case."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sort_by = "cuda_time_total" if device.type == "cuda" else "cpu_time_total"
    for case in _cases(device, only):
        vectorized, _, clients, _, _ = _cohort(case, device)
        vectorized()  # warm-up outside the trace
        with torch_profile(activities=activities) as prof:
            vectorized()
            if device.type == "cuda":
                torch.cuda.synchronize()
        print(f"\n== {case.name}, {clients} clients, one local epoch ==")
        print(prof.key_averages().table(sort_by=sort_by, row_limit=rows))


# Global switches the engine could adopt, timed against its defaults before any is adopted (issue 7: "when
# the numbers say they help"). Convolutions already use TF32 by default (torch.backends.cudnn.allow_tf32);
# bf16 autocast changes the numerics, so adopting it needs an accuracy check on a paper cell as well; and
# cuDNN autotunes each new input shape once, which a paper run with unequal clients meets more often than
# the benchmark's one warm-up shows.
SWITCHES = ("cudnn_benchmark", "tf32_matmul", "bf16_autocast")


@contextlib.contextmanager
def switch(name: str, device: torch.device):
    """Turn one of SWITCHES on for the duration of the block; the defaults come back after it."""
    if name not in SWITCHES:
        raise ValueError(f"unknown switch {name!r}; known: {', '.join(SWITCHES)}")
    benchmark, precision = torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()
    try:
        torch.backends.cudnn.benchmark = benchmark or name == "cudnn_benchmark"
        if name == "tf32_matmul":
            torch.set_float32_matmul_precision("high")
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=name == "bf16_autocast"):
            yield
    finally:
        torch.backends.cudnn.benchmark = benchmark
        torch.set_float32_matmul_precision(precision)


def run_switches(case: Case, device: torch.device, repeats: int) -> dict:
    """The engine's client-samples/s on `case` with its defaults, and its speed with each switch on as a
    ratio to that (> 1: the switch helps). Each switch's first call, cuDNN's autotuning included, is the
    untimed warm-up."""
    vectorized, _, clients, _, batching = _cohort(case, device)
    base = _best_time(vectorized, repeats, device)
    row = {"case": case.name, "clients": clients, "batch_size": case.batch_size, "batching": batching,
           "default_samples_per_s": _samples_per_s(case, clients, base)}
    for name in SWITCHES:
        with switch(name, device):
            row[name] = base / _best_time(vectorized, repeats, device)
    return row


def switch_speedups(device: str = "auto", repeats: int = 3, only: list[str] | None = None,
                    out: Path | None = None) -> list:
    """`fedcore bench --switches`: run_switches for every case, printed as a table."""
    dev = resolve_device(device)
    env = results.env_info(dev)
    print(f"engine under global switches on {env['device_name']} ({dev}), torch {env['torch_version']}, "
          f"commit {env['git_commit']}; speed relative to the defaults")
    print(f"{'case':<22}{'clients':>8}{'default/s':>12}" + "".join(f"{n:>17}" for n in SWITCHES))
    rows = []
    for case in _cases(dev, only):
        row = run_switches(case, dev, repeats)
        rows.append(row)
        print(f"{row['case']:<22}{row['clients']:>8}{row['default_samples_per_s']:>12,.0f}"
              + "".join(f"{row[n]:>16.2f}x" for n in SWITCHES) + f"  ({row['batching']})", flush=True)
    _save(out, env, repeats, "switches", rows)
    return rows


def main(device: str = "auto", repeats: int = 3, only: list[str] | None = None, out: Path | None = None) -> list:
    dev = resolve_device(device)
    env = results.env_info(dev)
    print(f"engine benchmark on {env['device_name']} ({dev}), torch {env['torch_version']}, "
          f"{env['torch_threads']} threads, commit {env['git_commit']}")
    loop_note = ""
    if dev.type == "cuda":
        loop_note = f"   (loop timed on {GPU_LOOP_CLIENTS} clients: its time is linear in them)"
    print(f"{'case':<22}{'clients':>8}{'vectorized/s':>15}{'loop/s':>12}{'ratio':>8}{'target':>8}{loop_note}")
    rows = []
    for case in _cases(dev, only):
        r = run_case(case, dev, repeats)
        rows.append(r)
        # the engine's CPU path for CNNs is the plain loop itself: its ratio is 1 up to timing noise
        ok = "same path" if r["batching"] == "loop" else "ok" if r["ratio"] >= r["target"] else "BELOW"
        print(f"{r['case']:<22}{r['clients']:>8}{r['vectorized_samples_per_s']:>15,.0f}"
              f"{r['loop_samples_per_s']:>12,.0f}{r['ratio']:>7.1f}x{r['target']:>7.0f}x {ok} ({r['batching']}"
              + (f"; vmap {r['vmap_samples_per_s']:,.0f}/s)" if "vmap_samples_per_s" in r else ")"), flush=True)
    _save(out, env, repeats, "cases", rows)
    return rows
