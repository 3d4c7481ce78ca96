"""The exceptions the CLI turns into one clear line, and how a signal becomes an interruption."""

import contextlib
import signal


class ConfigError(ValueError):
    """Bad user input: names the flag or file and what is allowed."""


class RunInterrupted(Exception):
    """Ctrl-C (or SIGTERM) during a run: the last completed round is saved in a checkpoint."""

    def __init__(self, round: int, checkpoint):
        super().__init__(f"interrupted after round {round}; checkpoint written to {checkpoint}; "
                         f"run the same command with --resume to continue")
        self.round, self.checkpoint = round, checkpoint


class ReproduceInterrupted(Exception):
    """Ctrl-C (or SIGTERM) during `reproduce`: finished cells are saved, cells in flight checkpointed."""

    def __init__(self):
        super().__init__("interrupted; finished cells are saved and the cells in flight checkpointed: "
                         "the same command resumes them")


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def stop_like_ctrl_c() -> None:
    """SIGTERM (`kill`, `timeout`, batch schedulers) and SIGINT both stop a run as Ctrl-C does: the rounds
    done are checkpointed. SIGINT is re-armed because a shell starts background commands with it ignored."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _raise_interrupt)


@contextlib.contextmanager
def stopping_like_ctrl_c():
    """`stop_like_ctrl_c` for the duration of a block; the previous handlers come back after it."""
    saved = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    stop_like_ctrl_c()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, saved[0])
        signal.signal(signal.SIGTERM, saved[1])
