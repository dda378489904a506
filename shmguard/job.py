"""What a training job asks for: the DataLoader settings that decide its shared-memory footprint.

A Job comes from command-line options or from SHMGUARD_* environment variables
(which `shmguard run` and `render` hand to the container so that `health` and
`check` inside it know the job). For jobs on several GPUs it also carries how
the GPUs talk and the NCCL_* variables the processes see, which decide NCCL's
own /dev/shm (shmguard.nccl). Validation happens here, once, with messages
that name the option. Standard library only: `shmguard health` imports this.
"""

import os

from shmguard.record import Record
from shmguard.units import SIZE_RULE, parse_size

# Bytes per element of the dtypes people load samples as.
DTYPE_BYTES = {
    "float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float64": 8, "double": 8,
    "uint8": 1, "int8": 1, "int16": 2, "int32": 4, "int64": 8, "long": 8, "bool": 1,
    "complex64": 8, "complex128": 16,
}
SHARING_STRATEGIES = ("file_descriptor", "file_system")
# What the DataLoader's collate_fn does with a batch's samples: `default` stacks each tensor of a sample
# into one batch tensor (torch's default_collate); `list` keeps the per-sample tensors (lists, tuple(zip(*b)),
# dicts of lists), and in a worker each of them becomes its own shared-memory segment.
COLLATES = ("default", "list")

VALUE, FLAG = "value", "flag"  # an option's type: one text (`--workers 4`), or on/off (`--pin-memory/--no-pin-memory`)
ENV_PREFIX = "SHMGUARD_"
ANNOTATION_PREFIX = "shmguard.io/"


def usage(message: str) -> Exception:
    """The UsageError (shmguard.errors) that refuses a value: made, and its module loaded, only when one is refused,
    so that `health`, which runs every few seconds, loads no error module on its way (BENCHMARKS.md section 10.2)."""
    from shmguard.errors import UsageError

    return UsageError(message)


class JobOption(Record):
    """One job option, and everything derived from it: its flag, its SHMGUARD_* variable, its shmguard.io/*
    annotation, fn's functionConfig key, its click and argparse declarations and the DataLoader attribute the
    Python API reads it from. The name is the Job field (and make_job's and JobOptions' argument) it sets."""

    name: str  # the Job field: batch_size
    help: str
    kind: str = VALUE  # VALUE or FLAG
    api: str | None = None  # the DataLoader attribute the Python API reads (num_workers); None: the job options say it

    @property
    def flag(self) -> str:
        """The command-line flag: --batch-size."""
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        """The variable `run` and `render` set and `check`, `health`, the exporter and the API read: SHMGUARD_BATCH_SIZE."""
        return ENV_PREFIX + self.name.upper()

    @property
    def annotation(self) -> str:
        """The pod annotation `patch`, `fn`, the webhook, `explain` and the exporter read: shmguard.io/batch-size."""
        return ANNOTATION_PREFIX + self.name.replace("_", "-")

    @property
    def setting(self) -> str:
        """The key of `fn`'s functionConfig and of the webhook's --default: batch-size."""
        return self.name.replace("_", "-")

    def click_declaration(self) -> tuple[tuple[str, ...], dict]:
        """(the parameter declarations, the keyword arguments) of its click.option."""
        if self.kind == FLAG:
            return ((f"{self.flag}/--no-{self.flag[2:]}", self.name),
                    {"default": None, "envvar": self.env, "show_envvar": True, "help": self.help})
        return ((self.flag, self.name), {"envvar": self.env, "show_envvar": True, "metavar": "VALUE", "help": self.help})

    def argparse_declarations(self) -> list[tuple[tuple[str, ...], dict]]:
        """[(the flags, the keyword arguments)] of its argparse arguments (`check` on the standard library)."""
        help_text = f"{self.help} [env var: {self.env}]"
        if self.kind == FLAG:
            return [((self.flag,), {"dest": self.name, "action": "store_const", "const": "1", "help": help_text}),
                    ((f"--no-{self.flag[2:]}",), {"dest": self.name, "action": "store_const", "const": "0"})]
        return [((self.flag,), {"dest": self.name, "metavar": "VALUE", "help": help_text})]


# The job options, in the order `--help` lists them. Values are text, validated by make_job.
OPTIONS = (
    JobOption("workers", "DataLoader num_workers.", api="num_workers"),
    JobOption("batch_size", "Samples per batch.", api="batch_size"),
    JobOption("sample_shape", "Shape of one sample, e.g. 3,224,224 (the largest, if they vary)."),
    JobOption("dtype", "Element type of the sample (default float32)."),
    JobOption("sample_bytes", f"Size of one sample instead of a shape: {SIZE_RULE}."),
    JobOption("prefetch_factor", "Batches each worker loads ahead (default 2, as PyTorch).", api="prefetch_factor"),
    JobOption("procs_per_node", "Training processes in the container, each with its own DataLoader (default 1)."),
    JobOption("gpus", "GPUs the job needs (default 0; `run` also takes all)."),
    JobOption("sharing_strategy", "torch.multiprocessing sharing strategy: file_descriptor (default) or file_system."),
    JobOption("collate", "What the collate_fn makes of a batch: default (torch's default_collate stacks samples) "
                         "or list (per-sample tensors kept in lists, e.g. lambda b: tuple(zip(*b)); each tensor "
                         "is then its own page-rounded segment in /dev/shm)."),
    JobOption("tensors_per_sample", "Tensors in one sample (e.g. 3 for image, boxes, labels; default 1); numbers, "
                                    "strings and numpy arrays do not count."),
    JobOption("batch_segments", "The tensor sizes of one batch as `shmguard measure` prints them (SIZE[xCOUNT],...): "
                                "replaces the estimate from --collate."),
    JobOption("nccl_transport", "How the job's GPUs talk, for NCCL's own /dev/shm: shm (default: through host memory, "
                                "the most /dev/shm) or p2p (NVLink/PCIe peer-to-peer: none)."),
    JobOption("nccl_version", "The NCCL version the job's torch uses, e.g. 2.21.5 (python -c 'import torch; "
                              "print(torch.cuda.nccl.version())'): NCCL's own /dev/shm depends on it. Default: found in "
                              "the container (check, health), else sized for the version that needs most."),
    JobOption("pin_memory", "The DataLoader pins memory.", kind=FLAG, api="pin_memory"),
)
NAMES = tuple(option.name for option in OPTIONS)
# Option name -> SHMGUARD_* variable, made from the table (the names `shmguard run` sets).
ENV_VARS = {option.name: option.env for option in OPTIONS}


class Job(Record):
    """The DataLoader job, per training process; procs_per_node processes each run one."""

    workers: int
    batch_size: int
    sample_bytes: int
    prefetch_factor: int = 2
    procs_per_node: int = 1
    gpus: int = 0
    pin_memory: bool = False
    sharing_strategy: str = "file_descriptor"
    sample_shape: tuple | None = None
    dtype: str | None = None
    # The byte sizes of the tensors of one (the largest) collated batch, when measured
    # (shmguard.segments); None: default_collate's one stacked tensor plus labels.
    batch_segments: tuple | None = None
    # How the GPUs on the node talk (shmguard.nccl): shm (assumed) or p2p; and the NCCL_* variables
    # the processes see that change NCCL's /dev/shm, as sorted (name, value) pairs.
    nccl_transport: str = "shm"
    nccl_env: tuple = ()
    collate: str = "default"
    tensors_per_sample: int = 1
    # The NCCL version the job's torch uses (`2.21.5`), which changes NCCL's /dev/shm; None: not known.
    nccl_version: str | None = None

    @property
    def batch_bytes(self) -> int:
        """Payload bytes of one collated batch (the largest, for variable-size samples)."""
        return self.batch_size * self.sample_bytes

    def to_values(self) -> dict[str, str]:
        """The job as option values (option name -> text): the one way back from a Job to what describes it.

        `make_job(**job.to_values(), nccl_env=job.nccl_env)` is the same job. The SHMGUARD_* variables `run` and
        `render` hand the container are these values (to_env), and so are the defaults that `patch`, `explain`
        and the webhook complete from a pod's annotations; default values are left out where the variable would
        only repeat them."""
        values = {
            "workers": str(self.workers),
            "batch_size": str(self.batch_size),
            "prefetch_factor": str(self.prefetch_factor),
            "procs_per_node": str(self.procs_per_node),
            "gpus": str(self.gpus),
            "pin_memory": "1" if self.pin_memory else "0",
            "sharing_strategy": self.sharing_strategy,
        }
        if self.nccl_transport != "shm":
            values["nccl_transport"] = self.nccl_transport
        if self.nccl_version:
            values["nccl_version"] = self.nccl_version
        if self.sample_shape:
            values["sample_shape"] = ",".join(map(str, self.sample_shape))
            values["dtype"] = self.dtype or "float32"
        else:
            values["sample_bytes"] = str(self.sample_bytes)
        if self.collate != "default":
            values["collate"] = self.collate
        if self.tensors_per_sample != 1:
            values["tensors_per_sample"] = str(self.tensors_per_sample)
        if self.batch_segments:
            from shmguard.segments import encode

            values["batch_segments"] = encode(self.batch_segments)
        return values

    def to_env(self) -> dict[str, str]:
        """The SHMGUARD_* variables that describe this job to `health`/`check` inside the container."""
        return {ENV_VARS[name]: value for name, value in self.to_values().items()}


MAX_COUNT = 1_000_000  # workers, batch size, prefetch, processes, GPUs: more is a typo, not a job
MAX_SAMPLE_BYTES = 2**40  # 1 TiB per sample: past that it is not a DataLoader sample


def parse_count(name: str, value, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """A whole number in [minimum, maximum], or a UsageError naming the option (usage)."""
    text = str(value).strip()
    flag = f"--{name.replace('_', '-')}"
    if len(text) > 20:
        raise usage(f"{flag} must be a whole number from {minimum} to {maximum:,}, not {text[:20]}…")
    try:
        number = int(text)
    except ValueError:
        raise usage(f"{flag} must be a whole number, not {text!r}") from None
    if number < minimum:
        raise usage(f"{flag} must be at least {minimum}, not {number}")
    if number > maximum:
        raise usage(f"{flag} must be at most {maximum:,}, not {number:,}")
    return number


def parse_shape(value) -> tuple[int, ...]:
    """`3,224,224` (or `3x224x224`) into a tuple of positive ints."""
    text = str(value).strip()
    parts = text.replace("x", ",").replace("X", ",").split(",")
    if len(parts) > 16 or len(text) > 200:
        raise usage(f"--sample-shape must be at most 16 dimensions like 3,224,224, not {text[:40]!r}…")
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise usage(f"--sample-shape must be positive integers like 3,224,224, not {text!r}") from None
    if any(d <= 0 for d in shape):
        raise usage(f"--sample-shape must be positive integers like 3,224,224, not {text!r}")
    return shape


def parse_flag(name: str, value) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise usage(f"--{name.replace('_', '-')} must be true or false, not {value!r}")


def make_job(
    workers=None, batch_size=None, sample_shape=None, dtype=None, sample_bytes=None,
    prefetch_factor=None, procs_per_node=None, gpus=None, pin_memory=None, sharing_strategy=None,
    nccl_transport=None, nccl_env=None, collate=None, tensors_per_sample=None, batch_segments=None,
    nccl_version=None,
) -> Job:
    """Validate raw option values (strings or numbers; None = not given) into a Job.

    The sample size is either sample_bytes (a size: `602112`, `588KiB`) or
    sample_shape with dtype (default float32); exactly one of the two is needed.
    nccl_env: the NCCL_* variables the training processes see (a mapping or pairs; others are ignored).
    batch_segments (measured tensor sizes of one batch: a tuple, or `SIZE[xCOUNT],...`)
    replaces what collate and tensors_per_sample would otherwise estimate.
    """
    if workers is None or batch_size is None:
        missing = [name for name, value in (("workers", workers), ("batch-size", batch_size)) if value is None]
        raise usage(f"the job needs {' and '.join('--' + m for m in missing)} (or "
                    f"{' and '.join('SHMGUARD_' + m.upper().replace('-', '_') for m in missing)})"
                    + (" too: only its workers were given" if workers is not None else
                       " too: only its batch size was given" if batch_size is not None else ""))
    workers_n = parse_count("workers", workers, 0)
    batch_n = parse_count("batch_size", batch_size, 1)
    shape = None
    dtype_name = None
    if sample_bytes is not None and sample_shape is not None:
        raise usage("give the sample size once: --sample-shape (with --dtype) or --sample-bytes, not both")
    if sample_bytes is not None:
        try:
            per_sample = parse_size(sample_bytes)
        except ValueError as exc:
            raise usage(f"--sample-bytes: {exc}") from None
        if per_sample <= 0:
            raise usage("--sample-bytes must be more than 0")
        if per_sample > MAX_SAMPLE_BYTES:
            raise usage(f"--sample-bytes {sample_bytes} is more than 1 TiB per sample")
    elif sample_shape is not None:
        shape = sample_shape if isinstance(sample_shape, tuple) else parse_shape(sample_shape)
        dtype_name = (dtype or "float32").strip().lower().removeprefix("torch.")
        if dtype_name not in DTYPE_BYTES:
            raise usage(f"--dtype must be one of {', '.join(sorted(DTYPE_BYTES))}, not {dtype!r}")
        per_sample = DTYPE_BYTES[dtype_name]
        for dim in shape:
            per_sample *= dim
        if per_sample > MAX_SAMPLE_BYTES:
            raise usage(f"--sample-shape {','.join(map(str, shape))} is more than 1 TiB per sample")
    else:
        raise usage("the job needs the sample size: --sample-shape 3,224,224 [--dtype float32] or --sample-bytes SIZE")
    strategy = (sharing_strategy or "file_descriptor").strip()
    if strategy not in SHARING_STRATEGIES:
        raise usage(f"--sharing-strategy must be file_descriptor or file_system, not {strategy!r}")
    collate_name = str(collate or "default").strip().lower()
    if collate_name not in COLLATES:
        raise usage(f"--collate must be default (torch's default_collate) or list (per-sample tensors kept in "
                         f"lists, e.g. collate_fn=lambda b: tuple(zip(*b))), not {collate!r}")
    segments = None
    if batch_segments is not None and batch_segments != "" and batch_segments != ():
        if isinstance(batch_segments, (tuple, list)):
            try:
                segments = tuple(int(size) for size in batch_segments)
            except (TypeError, ValueError):
                raise usage(f"--batch-segments must be byte sizes, not {batch_segments!r}") from None
            if any(size < 0 for size in segments):
                raise usage("--batch-segments sizes cannot be negative")
        else:
            from shmguard.segments import decode

            try:
                segments = decode(batch_segments)
            except ValueError as exc:
                raise usage(f"--batch-segments: {exc}") from None
    return Job(
        workers=workers_n,
        batch_size=batch_n,
        sample_bytes=per_sample,
        prefetch_factor=parse_count("prefetch_factor", 2 if prefetch_factor is None else prefetch_factor, 1),
        procs_per_node=parse_count("procs_per_node", 1 if procs_per_node is None else procs_per_node, 1),
        gpus=parse_count("gpus", 0 if gpus is None else gpus, 0),
        pin_memory=parse_flag("pin_memory", False if pin_memory is None else pin_memory),
        sharing_strategy=strategy,
        sample_shape=shape,
        dtype=dtype_name,
        nccl_transport=parse_transport(nccl_transport),
        nccl_env=nccl_pairs(nccl_env),
        batch_segments=segments,
        collate=collate_name,
        tensors_per_sample=parse_count("tensors_per_sample", 1 if tensors_per_sample is None else tensors_per_sample, 1),
        nccl_version=parse_nccl_version(nccl_version),
    )


def parse_transport(value) -> str:
    """--nccl-transport: shm (the default, the most /dev/shm) or p2p; the module loads only for another value."""
    if value is None or str(value).strip().lower() in ("", "shm"):
        return "shm"
    from shmguard import nccl

    return nccl.parse_transport(value)


def parse_nccl_version(value) -> str | None:
    """--nccl-version (`2.21.5`, `v2.21.5-1`, `(2, 21, 5)`) as `2.21.5`; None: not given (the module loads only when given)."""
    if value is None or value == "" or value == ():
        return None
    from shmguard import nccl

    return nccl.parse_version(value)


def nccl_pairs(values) -> tuple:
    """The NCCL_* values that change NCCL's /dev/shm, checked (shmguard.nccl); none: the module is not loaded."""
    if not values:
        return ()
    from shmguard import nccl

    return nccl.validate_env(values)


def nccl_environ(environ) -> tuple:
    """The footprint-changing NCCL_* variables of an environment (shmguard.nccl.env_of), when it has any."""
    if not environ or not any(name.startswith("NCCL_") for name in environ):
        return ()
    from shmguard import nccl

    return nccl.env_of(environ)


def env_values(environ=None) -> dict[str, str]:
    """The job values set in SHMGUARD_* variables, keyed by option name (empty strings count as unset)."""
    environ = os.environ if environ is None else environ
    return {name: environ[var] for name, var in ENV_VARS.items() if environ.get(var, "").strip() != ""}


def describes_job(values) -> bool:
    """Whether job values (option name -> value) describe a job at all: they give a worker count or a batch size.
    The one test of it: for SHMGUARD_* variables, annotations, options and the layers of shmguard.declared."""
    return "workers" in values or "batch_size" in values


def job_from_env(environ=None) -> Job | None:
    """The job described by SHMGUARD_* (and NCCL_*) variables alone, or None when they do not describe one.

    `health`'s standard-library path: it runs where `shmguard run` set SHMGUARD_PROCS_PER_NODE and SHMGUARD_GPUS,
    so it infers nothing. Everything else that reads a container's job calls shmguard.declared.declared_job,
    whose environment layer this is."""
    environ = os.environ if environ is None else environ
    values = env_values(environ)
    if not describes_job(values):
        return None
    try:
        return make_job(**values, nccl_env=nccl_environ(environ))
    except Exception as exc:
        from shmguard.errors import UsageError  # on the error path only

        if not isinstance(exc, UsageError):
            raise
        # A bad variable: name the variables the values came from, not the flags of other commands.
        message = str(exc)
        for name, var in ENV_VARS.items():
            message = message.replace(f"--{name.replace('_', '-')}", var)
        raise usage(message) from None
