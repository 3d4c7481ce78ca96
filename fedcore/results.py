"""Results files: one JSON per run, schema-versioned, written atomically.

    {"schema": "fedcore.results/1", "config": {...}, "env": {...},
     "rounds": [{"round", "test_acc", "test_loss", "train_loss", "wall_s", ...algorithm metrics}],
     "summary": {"final_acc", "best_acc", "rounds_to_target", "total_wall_s", ...}}
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

import torch

from fedcore.errors import ConfigError

SCHEMA = "fedcore.results/1"
REQUIRED = {"schema", "config", "env", "rounds", "summary"}
ROUND_KEYS = {"round", "test_acc", "test_loss", "train_loss", "wall_s"}
SUMMARY_KEYS = {"final_acc", "best_acc", "rounds_to_target", "total_wall_s"}


def git_commit() -> str:
    """The commit of the fedcore checkout ('+dirty' if it has uncommitted changes), or 'unknown'."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             check=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def env_info(device: torch.device) -> dict:
    from fedcore import __version__
    import torchvision

    return {
        "fedcore_version": __version__,
        "git_commit": git_commit(),
        "torch_version": torch.__version__,
        "torchvision_version": torchvision.__version__,
        "python_version": platform.python_version(),
        "device": str(device),
        "device_name": device_name(device),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu_count": torch.cuda.device_count(),
        "hostname": platform.node(),
        "start_time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_json_atomic(path: Path, obj: dict) -> None:
    """Write to a temporary file beside `path`, then rename: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_writable(path: Path, flag: str = "--out") -> None:
    """Fail before a long run, not after it, when the results cannot be written."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot write {path} ({exc.strerror or exc})") from None


def validate(doc: dict, source: str = "results") -> None:
    """Raise ConfigError if `doc` is not a results file of this schema."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not REQUIRED <= set(doc):
        raise ConfigError(f"{source}: not a {SCHEMA} results file")
    missing = SUMMARY_KEYS - set(doc["summary"])
    missing |= {k for r in doc["rounds"] for k in ROUND_KEYS - set(r)}
    if missing:
        raise ConfigError(f"{source}: missing {', '.join(sorted(missing))}")


def load(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read results ({exc})") from None
    validate(doc, str(path))
    return doc
