"""Sizes as people type them, and as Docker, Kubernetes and Slurm want them.

The rule (stated in every --help that takes a size): a plain number is bytes;
k, m, g, t — with or without a trailing b, or as KiB/MiB/GiB/TiB or Ki/Mi/Gi/Ti —
are powers of 1024, as in Docker, where `--shm-size 2g` means 2 GiB. So
`2g` = `2gb` = `2GiB` = `2Gi` = 2147483648 bytes. Fractions are allowed (`1.5g`)
and rounded up to a whole byte.

Standard library only: `shmguard health` imports this.
"""

KIB = 1024
MIB = 1024**2
GIB = 1024**3
TIB = 1024**4

_MULTIPLIERS = {
    "": 1, "b": 1,
    "k": KIB, "kb": KIB, "kib": KIB, "ki": KIB,
    "m": MIB, "mb": MIB, "mib": MIB, "mi": MIB,
    "g": GIB, "gb": GIB, "gib": GIB, "gi": GIB,
    "t": TIB, "tb": TIB, "tib": TIB, "ti": TIB,
}

MAX_SIZE = 2**63  # 8 EiB: no memory, shm or sample is bigger; past it a "size" is a typo or an attack
SIZE_RULE = "bytes, or k/m/g/t (also kb, KiB, Ki …), all powers of 1024 as in Docker: 2g = 2GiB"


def parse_size(text: str) -> int:
    """Parse `64m`, `2g`, `2GiB`, `512MB`, `1.5g` or `1048576` into bytes; ValueError if it is not a size."""
    raw = str(text).strip()
    number = raw.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ").strip()
    unit = raw[len(number):].strip().lower() if number else ""
    if not number or unit not in _MULTIPLIERS:
        raise ValueError(f"{raw!r} is not a size ({SIZE_RULE})")
    try:
        value = float(number) if any(c in number for c in ".eE") else int(number)
    except ValueError:
        raise ValueError(f"{raw!r} is not a size ({SIZE_RULE})") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{raw!r} is not a size ({SIZE_RULE})")
    if value < 0:
        raise ValueError(f"{raw!r}: a size cannot be negative")
    scaled = value * _MULTIPLIERS[unit]
    if scaled != scaled or scaled > MAX_SIZE:
        raise ValueError(f"{raw!r} is too large to be a size (at most 8 EiB)")
    whole = int(scaled)
    return whole if whole == scaled else whole + 1


def format_size(n: int | float) -> str:
    """Human-readable binary size: `64.0 MiB`, `1.5 GiB`, `512 B`."""
    n = float(n)
    for unit, scale in (("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if abs(n) >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def docker_size(n: int) -> str:
    """A Docker size flag value that is at least n bytes, in whole MiB (`--shm-size=337m`)."""
    if n % GIB == 0 and n:
        return f"{n // GIB}g"
    return f"{max(1, ceil_div(n, MIB))}m"


def compose_size(n: int) -> str:
    """A compose file size (`shm_size`, `mem_limit`) that is at least n bytes: the same notation as Docker's flags."""
    return docker_size(n)


def k8s_quantity(n: int) -> str:
    """A Kubernetes quantity that is at least n bytes, in whole Mi (`337Mi`, `2Gi`)."""
    if n % GIB == 0 and n:
        return f"{n // GIB}Gi"
    return f"{max(1, ceil_div(n, MIB))}Mi"


def slurm_size(n: int) -> str:
    """A Slurm memory size (`--mem=917M`, `--mem=2G`) that is at least n bytes; Slurm's M and G are MiB and GiB."""
    if n % GIB == 0 and n:
        return f"{n // GIB}G"
    return f"{max(1, ceil_div(n, MIB))}M"


_K8S_SUFFIXES = {
    "Ki": KIB, "Mi": MIB, "Gi": GIB, "Ti": TIB, "Pi": 1024**5, "Ei": 1024**6,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": None,
}


def parse_quantity(value) -> int:
    """A Kubernetes memory quantity (`369Mi`, `2Gi`, `1G`, `512M`, `1e9`, `1048576`) in bytes, rounded up.

    Unlike the Docker-style sizes above, Kubernetes' M, G, k are decimal and Mi, Gi, Ki binary
    (https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/quantity/).
    ValueError for anything else, including millibytes (`m`).
    """
    text = str(value).strip()
    for suffix in sorted(_K8S_SUFFIXES, key=len, reverse=True):
        if text.endswith(suffix) and text[:-len(suffix)]:
            scale = _K8S_SUFFIXES[suffix]
            number = text[:-len(suffix)]
            break
    else:
        scale, number = 1, text
    if scale is None:
        raise ValueError(f"{text!r}: millibytes make no sense for memory")
    try:
        amount = float(number) if any(c in number for c in ".eE") else int(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from None
    if amount != amount or amount in (float("inf"), float("-inf")) or amount < 0:
        raise ValueError(f"{text!r} is not a Kubernetes quantity")
    scaled = amount * scale
    if scaled > MAX_SIZE:
        raise ValueError(f"{text!r} is too large to be a memory quantity (at most 8 EiB)")
    whole = int(scaled)
    return whole if whole == scaled else whole + 1


MAX_BYTES = 2**63 - 1  # the engine's sizes (and Kubernetes') are int64


def parse_bytes(flag: str, text: str, minimum: int = 1) -> int:
    """A size given on a command line, as parse_size reads it, at least `minimum` and at most what an int64 holds;
    a UsageError naming the flag otherwise (one line, exit 2)."""
    from shmguard.errors import UsageError  # here: health reads sizes with parse_size and loads no errors module

    try:
        value = parse_size(text)
    except OverflowError:
        value = MAX_BYTES + 1
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    if value < minimum:
        raise UsageError(f"{flag} must be at least {minimum} byte{'s' if minimum > 1 else ''}, not {text!r}"
                         + (" (Docker reads 0 as its default, 64m)" if value == 0 and flag == "--shm-size" else ""))
    if value > MAX_BYTES:
        raise UsageError(f"{flag} {text!r} is beyond what the engine can hold (2^63 bytes)")
    return value
