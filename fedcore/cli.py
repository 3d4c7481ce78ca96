"""`fedcore run` and `fedcore bench`. Every RunConfig field is a flag; --config FILE.toml supplies defaults."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from fedcore import config as C
from fedcore.errors import ConfigError, ReproduceInterrupted, RunInterrupted, stopping_like_ctrl_c


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("experiment (also settable in --config TOML, same names with _)")
    for f in dataclasses.fields(C.RunConfig):
        flag = "--" + f.name.replace("_", "-")
        kind = type(f.default) if f.default is not dataclasses.MISSING else str
        kwargs = {"default": None, "help": f"{f.metadata['help']} (default: {f.default!r})"}
        if f.name == "batch_size":
            kwargs["type"] = str
        elif f.name == "target_acc":
            kwargs.update(type=float, nargs="+")
        elif kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = kind
        group.add_argument(flag, **kwargs)


LR_GRID_HELP = ("run once per learning rate and keep the best, as McMahan et al. did: the fewest rounds to "
                "the first --target-acc, else the best accuracy")


def _check_lr_grid(grid: list[float] | None) -> tuple[float, ...] | None:
    if grid is not None and not all(lr > 0 and lr != float("inf") for lr in grid):
        raise ConfigError(f"--lr-grid must be positive learning rates; got {' '.join(map(str, grid))}")
    return None if grid is None else tuple(grid)


def _rates(grid: tuple[float, ...]) -> str:
    return " ".join(f"{lr:g}" for lr in grid)


def _run_lr_grid(cfg: C.RunConfig, runtime: C.Runtime, grid: tuple[float, ...]) -> None:
    """`fedcore run --lr-grid`: one run per lr (results files suffixed -lr<lr>), then the best one."""
    from fedcore import experiment, metrics

    docs = []
    for lr in grid:
        out = None if runtime.out is None else runtime.out.with_name(f"{runtime.out.stem}-lr{lr:g}.json")
        docs.append(experiment.run(dataclasses.replace(cfg, lr=lr), dataclasses.replace(runtime, out=out)))
        _print_summary(docs[-1])
    target = f"{cfg.target_acc[0]:g}" if cfg.target_acc else None
    best = max(docs, key=lambda d: metrics.lr_grid_score(d["summary"], target, "interpolated"))
    why = f"fewest rounds to {target}, else best accuracy" if target else "best final accuracy"
    print(f"lr grid {_rates(grid)}: best lr = {best['config']['lr']:g} ({why}); "
          f"results: {best['path']}")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="fedcore", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="run one federated training experiment")
    run.add_argument("--config", type=Path, help="TOML file of experiment settings (flags override it)")
    _add_config_flags(run)
    rt = run.add_argument_group("runtime (never changes the numbers)")
    rt.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    rt.add_argument("--client-chunk", type=int, default=0,
                    help="clients trained at once; bounds memory (default: 0 = automatic)")
    rt.add_argument("--checkpoint-every", type=int, default=0,
                    help="write a checkpoint every k rounds (default: 0 = only on Ctrl-C)")
    rt.add_argument("--resume", action="store_true", help="continue from the checkpoint beside --out")
    rt.add_argument("--out", type=Path, help="results JSON path (default: runs/<name>-<config hash>.json)")
    rt.add_argument("--quiet", action="store_true", help="no progress bar")
    run.add_argument("--lr-grid", type=float, nargs="+", metavar="LR", help=LR_GRID_HELP)

    rep = sub.add_parser("reproduce", help="run a paper table's cells at a scale and print the scoreboard")
    rep.add_argument("name", nargs="?", help="experiment name (see --list)")
    rep.add_argument("--scale", default="cpu", help="paper, cpu or smoke (default: cpu)")
    rep.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    rep.add_argument("--only", nargs="+", metavar="CELL", help="run only these cells")
    rep.add_argument("--jobs", type=int, default=1, help="cells run in parallel processes (default: 1)")
    rep.add_argument("--alongside", type=int, default=0, metavar="N",
                     help="runs outside this command sharing the machine, e.g. another reproduce; recorded "
                          "with each run (parallel_runs = jobs + N), as they stretch its wall time (default: 0)")
    rep.add_argument("--lr-grid", type=float, nargs="+", metavar="LR",
                     help="replace every cell's learning-rate grid: " + LR_GRID_HELP)
    rep.add_argument("--list", action="store_true", help="list experiments and how many runs are done")
    rep.add_argument("--scoreboard", action="store_true", help="print the scoreboard without running")

    bench = sub.add_parser("bench", help="vectorized engine vs plain per-client loop, client-samples/s")
    bench.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    bench.add_argument("--repeats", type=int, default=3, help="timed repetitions, best kept (default: 3)")
    bench.add_argument("--only", nargs="+", help="run only cases whose name contains one of these words")
    bench.add_argument("--out", type=Path, help="also write the figures to this JSON file")
    bench.add_argument("--profile", action="store_true",
                       help="print torch.profiler's top operators for one vectorized cohort per case instead")
    bench.add_argument("--switches", action="store_true",
                       help="instead, time the engine with each global switch on (cuDNN autotuning, TF32 "
                            "matmuls, bf16 autocast) against its defaults")
    return parser


def _config_from_args(args: argparse.Namespace) -> C.RunConfig:
    values = C.load_toml(args.config) if args.config else {}
    source = f"--config {args.config}" if args.config else "flags"
    values.update({k: v for k, v in vars(args).items() if k in C.field_names() and v is not None})
    return C.from_mapping(values, source)


def _print_summary(doc: dict) -> None:
    from fedcore import results

    cfg, s = doc["config"], doc["summary"]
    b = cfg["batch_size"] or "inf"
    print(f"{cfg['algorithm']} | {cfg['dataset']} {cfg['model']} | {cfg['partition']} K={cfg['clients']} "
          f"C={cfg['fraction']} E={cfg['local_epochs']} B={b} lr={cfg['lr']} | seed {cfg['seed']}")
    print(f"rounds {s['rounds_completed']}  final acc {s['final_acc']:.4f}  best acc {s['best_acc']:.4f}  "
          f"wall {s['total_wall_s']:.1f} s on {results.machines(doc)}")
    for target, r in s["rounds_to_target"].items():
        interp = "not reached" if r["interpolated"] is None else f"{r['interpolated']:.1f}"
        print(f"rounds to {target}: {interp} (running max, interpolated; first evaluated round: "
              f"{r['first_round'] if r['first_round'] is not None else 'not reached'})")
    print(f"results: {doc['path']}")


def _print_scoreboard(name: str, scale: str, grid: tuple[float, ...] | None, ran: bool) -> None:
    """The scoreboard after `reproduce`: over each cell's own lr grid, as the book shows it, even when
    --lr-grid chose the rates to run (scored over those alone, a cell whose best rate was not run would read
    "not reached"); `--scoreboard --lr-grid` scores over the rates given, and says so."""
    from fedcore import experiments, scoreboard

    exp = experiments.load(name, scale, lr_grid=None if ran else grid)
    if grid is not None:
        rates = _rates(grid)
        print(f"scoreboard over each cell's own learning-rate grid, as in the book; over the rates of this "
              f"run alone: fedcore reproduce {name} --scale {scale} --scoreboard --lr-grid {rates}" if ran else
              f"scoreboard restricted to learning rates {rates} (--lr-grid), not the book's, which scores "
              f"each cell over its own grid")
    print(scoreboard.format_text(exp, scoreboard.compare(exp)))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    with stopping_like_ctrl_c():
        return _main(args)


def _main(args: argparse.Namespace) -> int:
    try:
        if args.command == "run":
            from fedcore import experiment

            cfg = _config_from_args(args)
            runtime = C.Runtime(device=args.device, client_chunk=args.client_chunk,
                                checkpoint_every=args.checkpoint_every, out=args.out, resume=args.resume,
                                progress=not args.quiet)
            grid = _check_lr_grid(args.lr_grid)
            if grid:
                _run_lr_grid(cfg, runtime, grid)
            else:
                _print_summary(experiment.run(cfg, runtime))
        elif args.command == "reproduce":
            from fedcore import experiments, reproduce

            if args.list:
                print(reproduce.listing())
                return 0
            if not args.name:
                raise ConfigError("reproduce needs an experiment name or --list; known: "
                                  + ", ".join(experiments.names()))
            if args.jobs < 1:
                raise ConfigError(f"--jobs must be >= 1; got {args.jobs}")
            if args.alongside < 0:
                raise ConfigError(f"--alongside must be >= 0; got {args.alongside}")
            grid = _check_lr_grid(args.lr_grid)
            if not args.scoreboard:
                reproduce.reproduce(args.name, args.scale, device=args.device, only=args.only, jobs=args.jobs,
                                    alongside=args.alongside, lr_grid=grid)
            _print_scoreboard(args.name, args.scale, grid, ran=not args.scoreboard)
        elif args.command == "bench":
            from fedcore import bench

            if args.profile:
                bench.profile(bench.resolve_device(args.device), args.only)
            elif args.switches:
                bench.switch_speedups(device=args.device, repeats=args.repeats, only=args.only, out=args.out)
            else:
                bench.main(device=args.device, repeats=args.repeats, only=args.only, out=args.out)
    except ConfigError as exc:
        print(f"fedcore: error: {exc}", file=sys.stderr)
        return 2
    except (RunInterrupted, ReproduceInterrupted) as exc:
        print(f"fedcore: {exc}", file=sys.stderr)
        return 130
    except KeyboardInterrupt:  # outside a run (loading, benchmarks): nothing to checkpoint
        print("fedcore: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into `head` and the like: stop quietly (Python docs' recipe)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    return 0
