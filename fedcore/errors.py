"""The one exception type that the CLI turns into a single clear error line."""


class ConfigError(ValueError):
    """Bad user input: names the flag or file and what is allowed."""


class RunInterrupted(Exception):
    """Ctrl-C during a run: the last completed round is saved in a checkpoint."""

    def __init__(self, round: int, checkpoint):
        super().__init__(f"interrupted after round {round}; checkpoint written to {checkpoint}; "
                         f"run the same command with --resume to continue")
        self.round, self.checkpoint = round, checkpoint
