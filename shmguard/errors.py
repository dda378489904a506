"""The one error root of shmguard and the exit codes it maps to.

Every expected failure (bad input, a probe that could not run, an engine that is
not there) is a ShmguardError: the CLI boundary prints its message on one line
and exits with its code, never with a traceback.
"""

# Exit codes. The README's exit-code table lists the same numbers.
EXIT_OK = 0
EXIT_FAIL = 1  # the check found a problem (or the training command failed)
EXIT_USAGE = 2  # bad usage, bad input, or a probe/engine that could not run
EXIT_RUN_FAILED = 125  # `run`: the container could not be run at all (as `docker run`)
EXIT_INTERNAL = 70  # a bug in shmguard (EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)


class ShmguardError(Exception):
    """An expected failure with a message meant for the user."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(ShmguardError):
    """The user asked for something that cannot be: a bad value or option."""

    exit_code = EXIT_USAGE


class ShmTooSmall(ShmguardError):
    """/dev/shm cannot hold what the DataLoader puts in it (or already could not: a worker died of it).

    The message names what /dev/shm holds, what the job needs and the size to ask
    for; `shm_size` is that size as a `docker run --shm-size` value (None when no
    size would help, e.g. /dev/shm is not a tmpfs), `report` the verdict it came from.
    """

    exit_code = EXIT_FAIL

    def __init__(self, message: str, shm_size: str | None = None, report=None) -> None:
        super().__init__(message)
        self.shm_size = shm_size
        self.report = report


class ShmguardWarning(RuntimeWarning):
    """Issued by `shmguard.guard(loader, on_short="warn")` when /dev/shm is too small for the loader."""
