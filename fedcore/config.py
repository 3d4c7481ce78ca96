"""Run configuration: one frozen, validated dataclass whose fields are the CLI flags and TOML keys.

Field comments map to the papers' symbols. `RunConfig` is the identity of an experiment (saved beside
every result; a resumed checkpoint must match it). `Runtime` holds how to run it, which never changes
the numbers: device, chunking, checkpointing, output path, and the lr grid's leader, which may only end a
losing run sooner.
"""

from __future__ import annotations

import dataclasses
import math
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from fedcore.errors import ConfigError

PARTITIONS = ("iid", "shards", "power_law", "lognormal", "dirichlet")
WEIGHTINGS = ("samples", "uniform")
PRECISIONS = ("fp32", "bf16")


def _help(text: str, **kw):
    return field(metadata={"help": text}, **kw)


@dataclass(frozen=True)
class RunConfig:
    dataset: str = _help("mnist, fashion_mnist or cifar10", default="mnist")
    model: str = _help("network, see fedcore.models", default="mcmahan_2nn")
    algorithm: str = _help("federated algorithm: fedavg, fedprox, normnorm, momentum, fednnnn, fedumf, "
                           "scaffold, feddyn, feddc, fedumf_feddc", default="fedavg")
    partition: str = _help("client data split: " + ", ".join(PARTITIONS), default="iid")
    clients: int = _help("K (McMahan) / n (FedUmf): number of clients", default=100)
    fraction: float = _help("C: fraction of clients per round, m = max(C*K, 1); 0 means one client", default=0.1)
    local_epochs: int = _help("E (McMahan) / K (FedUmf): local epochs per round", default=1)
    batch_size: int = _help("B: local minibatch size; 0 or 'inf' = the whole local dataset", default=10)
    lr: float = _help("eta: client learning rate", default=0.1)
    lr_decay: float = _help("per-round learning-rate decay: eta_t = eta * decay^(t-1)", default=1.0)
    momentum: float = _help("client SGD momentum", default=0.0)
    weight_decay: float = _help("lambda: client weight decay", default=0.0)
    max_grad_norm: float = _help("clip each local step's gradient to this L2 norm over all parameters, before "
                                 "weight decay (0 = off; the FedDyn and FedDC code use 10)", default=0.0)
    weighting: str = _help("aggregation weights p_k: samples (n_k/n) or uniform (1/m)", default="samples")
    rounds: int = _help("T: communication rounds", default=200)
    eval_every: int = _help("evaluate the global model every this many rounds (and at the last)", default=1)
    target_acc: tuple[float, ...] = _help("test accuracies to report rounds-to-target for, e.g. 0.97 0.99",
                                          default=())
    stop_at_target: bool = _help("end the run at the first evaluation by which every --target-acc has been "
                                 "reached (the rounds-to-target tables need nothing after it)", default=False)
    seed: int = _help("seed for partition, init, client sampling and batches", default=0)
    shards_per_client: int = _help("shards partition: s shards per client (McMahan: 2)", default=2)
    power_law_exponent: float = _help("power_law partition: size of rank r proportional to r^-exponent",
                                      default=1.0)
    classes_per_client: int = _help("power_law partition: classes per client (0 = all, FedNNNN non-IID: 2)",
                                    default=0)
    lognormal_sigma: float = _help("lognormal partition: sigma of the client-size distribution", default=0.3)
    dirichlet_alpha: float = _help("dirichlet partition: concentration of class proportions", default=0.6)
    beta: float = _help("normnorm / fednnnn: norm scale beta (FedNNNN eq. 8, 12)", default=1.0)
    gamma: float = _help("momentum / fednnnn: server momentum gamma (FedNNNN eq. 10, 12)", default=0.0)
    mu: float = _help("fedprox: proximal coefficient mu", default=0.0)
    alpha: float = _help("fedumf, fedumf_feddc: fusion coefficient alpha in [0, 1]", default=1.0)
    feddyn_alpha: float = _help("feddyn: regularisation alpha", default=0.01)
    feddc_alpha: float = _help("feddc, fedumf_feddc: drift penalty alpha", default=0.01)
    noise_std: float = _help("sigma of Gaussian noise added to every uploaded client model "
                             "(McMahan replication poster sec. 2.4)", default=0.0)
    inputs: str = _help("input scaling: standardized (pixels in [0, 1], then per-channel mean and std of the "
                        "training set) or unit (pixels in [0, 1] only)", default="standardized")
    precision: str = _help("local training arithmetic: fp32, or bf16 (autocast: the clients' matmuls and "
                           "convolutions in bfloat16, weights and updates in fp32; evaluation stays fp32)",
                           default="fp32")
    train_subset: int = _help("use a random subset of this many training examples (0 = all)", default=0)
    test_subset: int = _help("use a random subset of this many test examples (0 = all)", default=0)

    def __post_init__(self):
        def need(ok: bool, flag: str, allowed: str):
            if not ok:
                raise ConfigError(f"--{flag} must be {allowed}; got {getattr(self, flag.replace('-', '_'))!r}")

        from fedcore import algorithms, data, models  # the registries live with their modules

        need(self.dataset in data.DATASET_NAMES, "dataset", "one of " + ", ".join(data.DATASET_NAMES))
        need(self.model in models.MODEL_NAMES, "model", "one of " + ", ".join(models.MODEL_NAMES))
        need(self.algorithm in algorithms.NAMES, "algorithm", "one of " + ", ".join(algorithms.NAMES))
        need(self.partition in PARTITIONS, "partition", "one of " + ", ".join(PARTITIONS))
        need(self.weighting in WEIGHTINGS, "weighting", "one of " + ", ".join(WEIGHTINGS))
        need(self.inputs in data.INPUT_SCALINGS, "inputs", "one of " + ", ".join(data.INPUT_SCALINGS))
        need(self.precision in PRECISIONS, "precision", "one of " + ", ".join(PRECISIONS))
        need(self.clients >= 1, "clients", ">= 1")
        need(0.0 <= self.fraction <= 1.0, "fraction", "in [0, 1] (0 means one client per round)")
        need(self.local_epochs >= 1, "local-epochs", ">= 1")
        need(self.batch_size >= 0, "batch-size", ">= 1, or 0 / inf for full batch")
        need(self.lr > 0 and math.isfinite(self.lr), "lr", "a positive number")
        need(0 < self.lr_decay <= 1, "lr-decay", "in (0, 1]")
        need(0 <= self.momentum < 1, "momentum", "in [0, 1)")
        need(self.weight_decay >= 0, "weight-decay", ">= 0")
        need(self.max_grad_norm >= 0, "max-grad-norm", ">= 0 (0 = no clipping)")
        need(self.rounds >= 1, "rounds", ">= 1")
        need(self.eval_every >= 1, "eval-every", ">= 1")
        need(all(0 < a <= 1 for a in self.target_acc), "target-acc", "accuracies in (0, 1]")
        need(self.beta > 0, "beta", "> 0")
        need(0 <= self.gamma < 1, "gamma", "in [0, 1)")
        need(self.mu >= 0, "mu", ">= 0")
        need(0 <= self.alpha <= 1, "alpha", "in [0, 1] (FedUmf: alpha in (0, 1]; 0 turns fusion off)")
        need(self.feddyn_alpha > 0, "feddyn-alpha", "> 0")
        need(self.feddc_alpha > 0, "feddc-alpha", "> 0")
        need(self.noise_std >= 0, "noise-std", ">= 0")
        need(not self.stop_at_target or bool(self.target_acc), "stop-at-target",
             "used together with --target-acc (there is nothing to stop at without one)")
        need(self.train_subset >= 0, "train-subset", ">= 0")
        need(self.test_subset >= 0, "test-subset", ">= 0")

    @property
    def clients_per_round(self) -> int:
        """m = max(C * K, 1) (McMahan et al. sec. 3)."""
        return max(int(self.fraction * self.clients), 1)

    def partition_params(self) -> dict:
        return {
            "iid": {},
            "shards": {"shards_per_client": self.shards_per_client},
            "power_law": {"exponent": self.power_law_exponent, "classes_per_client": self.classes_per_client},
            "lognormal": {"sigma": self.lognormal_sigma},
            "dirichlet": {"alpha": self.dirichlet_alpha},
        }[self.partition]

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "target_acc": list(self.target_acc)}


@dataclass(frozen=True)
class GridLeader:
    """The best finished learning rate of a run's lr grid (`run`, which reached `target` in `rounds`)."""

    run: str
    target: float
    rounds: float


@dataclass(frozen=True)
class Runtime:
    """How to run: none of these change the numbers a run produces (`leader` may end a run sooner)."""

    device: str = "auto"  # auto | cpu | cuda
    client_chunk: int = 0  # clients trained at once (0 = automatic)
    checkpoint_every: int = 0  # rounds between checkpoints (0 = only on Ctrl-C)
    out: Path | None = None  # results JSON path
    resume: bool = False
    progress: bool = True  # a progress bar per run, named after its results file
    progress_line: int = 0  # the bar's terminal line: parallel runs (reproduce --jobs) each take their own
    parallel_runs: int = 1  # runs sharing the machine (reproduce --jobs + --alongside); recorded: it stretches wall times
    # asked before every round for the rate to beat (reproduce re-reads the cell's finished rates, so one
    # finishing beside this run counts at once): the run ends once it can no longer reach the target sooner
    leader: Callable[[], GridLeader | None] | None = None

    def __post_init__(self):
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"--device must be auto, cpu or cuda; got {self.device!r}")
        if self.client_chunk < 0:
            raise ConfigError(f"--client-chunk must be >= 0 (0 = automatic); got {self.client_chunk}")
        if self.checkpoint_every < 0:
            raise ConfigError(f"--checkpoint-every must be >= 0; got {self.checkpoint_every}")


def with_defaults(stored: dict) -> dict:
    """A config dict as written by an earlier fedcore, completed with the defaults of fields added since
    (each new field's default keeps the old behaviour), so that it compares equal to today's to_dict()."""
    return {**RunConfig().to_dict(), **stored}


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(RunConfig)]


def parse_batch_size(text: str | int) -> int:
    if isinstance(text, int):
        return text
    if str(text).lower() in ("inf", "infinity", "full"):
        return 0
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"--batch-size must be a positive integer, 0 or inf; got {text!r}") from None


def from_mapping(values: dict, source: str) -> RunConfig:
    """A RunConfig from a dict of field values (TOML keys or CLI flags), rejecting unknown keys."""
    unknown = sorted(set(values) - set(field_names()))
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)}; allowed: {', '.join(field_names())}")
    values = dict(values)
    if "batch_size" in values:
        values["batch_size"] = parse_batch_size(values["batch_size"])
    if "target_acc" in values:
        ta = values["target_acc"]
        values["target_acc"] = tuple(float(a) for a in (ta if isinstance(ta, (list, tuple)) else [ta]))
    try:
        return RunConfig(**values)
    except TypeError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def load_toml(path: Path) -> dict:
    """The run settings in a TOML file (a flat table of RunConfig fields, or its [run] table)."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"--config: cannot read {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"--config: {path} is not valid TOML: {exc}") from None
    return doc.get("run", doc)
