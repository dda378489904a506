"""What a launcher in a container's command says of the training processes it starts on this node.

Each launcher is read by its own flags, as its documentation gives them (docs/design/launchers.md):

- torchrun, `python -m torch.distributed.run` and `torch.distributed.launch`: `--nproc-per-node`
  (`--nproc_per_node`) N, or `gpu`/`auto` (one per GPU); without it torchrun reads PET_NPROC_PER_NODE
  (shmguard.sizing reads that variable);
- `accelerate launch`: `--num_processes` N counts every machine's processes, `--num_machines` M the
  machines: N / M here;
- deepspeed: `--num_gpus` N per node, or `--include host:0,1` (the GPUs listed for the first host);
- xla_spawn.py (Hugging Face's TPU launcher): `--num_cores` N, one process per core;
- mpirun, mpiexec, orterun, prterun: `-np`/`-n`/`--np`/`-c` N in all; `-npernode`/`--npernode`/`-N` N or
  `--map-by ppr:N:node` per node; N shared over the hosts `-H`/`--host` names (or each host's `:slots`);
  with no host named they come from a hostfile, the environment or the scheduler (not known here);
- horovodrun: `-np` N in all, `-H host:slots,...` (the first host's slots); with no host, all run here.

The command is read as words (a `sh -c` script is split as a shell would, comments and line
continuations included); the launcher's own options end at the program it starts, so a training
script's own `--num_gpus` is never taken for the launcher's. Pure, standard library only.
"""

from __future__ import annotations

from shmguard.record import Record

TORCHRUN, ACCELERATE, DEEPSPEED, XLA_SPAWN, MPI, HOROVOD = (
    "torchrun", "accelerate launch", "deepspeed", "xla_spawn.py", "mpirun", "horovodrun")
TORCH_MODULES = ("torch.distributed.run", "torch.distributed.launch")
MPI_PROGRAMS = ("mpirun", "mpiexec", "orterun", "prterun")
SEPARATORS = {";", "&&", "||", "|", "&", "(", ")", "\n"}
PER_GPU = ("gpu", "auto", "xpu")  # torchrun's --nproc-per-node values that mean one per accelerator

# Flag spellings, per launcher and meaning.
FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    TORCHRUN: {"per_node": ("--nproc-per-node", "--nproc_per_node")},
    ACCELERATE: {"total": ("--num_processes", "--num-processes"), "machines": ("--num_machines", "--num-machines")},
    DEEPSPEED: {"per_node": ("--num_gpus", "--num-gpus"), "include": ("--include", "-i")},
    XLA_SPAWN: {"per_node": ("--num_cores", "--num-cores")},
    MPI: {"total": ("-np", "-n", "--np", "-c"), "per_node": ("-npernode", "--npernode", "-N"),
          "map_by": ("--map-by", "-map-by"), "hosts": ("-H", "--host", "-host"),
          "hostfile": ("--hostfile", "-hostfile", "--machinefile", "-machinefile", "--default-hostfile")},
    HOROVOD: {"total": ("-np", "--num-proc"), "hosts": ("-H", "--hosts")},
}


class Launch(Record):
    """A launcher in a command and what its flags say of this node's processes."""

    launcher: str  # TORCHRUN, ACCELERATE, DEEPSPEED, XLA_SPAWN, MPI, HOROVOD
    said: str = ""  # the flags that decide, as written (`--nproc_per_node=8`, `-np 16 -H a,b`); "" when none
    value: str = ""  # the deciding value as written (`8`, `gpu`, `${GPU_PER_NODE}`): what a placeholder check reads
    per_node: int | None = None  # processes on this node, when the words say it
    per_gpu: bool = False  # one per GPU (torchrun's gpu/auto)

    where: str = "in the command"  # where it was said, for messages

    @property
    def source(self) -> str:
        return f"{self.said} {self.where}"


def words_of(command) -> list[str]:
    """A command's words, each argument holding spaces (a `sh -c` script) split as a shell splits it, with its
    separators (`;`, `&&`, a line's end) kept as words of their own."""
    import shlex

    out: list[str] = []
    for arg in command or ():
        text = str(arg)
        if not any(ch.isspace() for ch in text) and not any(sep in text for sep in (";", "&", "|")):
            out.append(text)
            continue
        text = text.replace("\\\n", " ")
        for line in text.splitlines():
            lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
            lexer.whitespace_split = True
            lexer.commenters = "#"
            try:
                out += list(lexer)
            except ValueError:  # an unbalanced quote: the words as they stand
                out += line.split()
            out.append("\n")
    return out


def _start(words: list[str], i: int) -> tuple[str, int] | None:
    """(launcher, index of its first option) when words[i] starts a launcher."""
    word = words[i]
    base = word.rsplit("/", 1)[-1]
    if base == "torchrun":
        return TORCHRUN, i + 1
    if word in TORCH_MODULES and i and words[i - 1] == "-m":
        return TORCHRUN, i + 1
    if base == "accelerate" and i + 1 < len(words) and words[i + 1] == "launch":
        return ACCELERATE, i + 2
    if base == "deepspeed" or (word == "deepspeed.launcher.runner" and i and words[i - 1] == "-m"):
        return DEEPSPEED, i + 1
    if base == "xla_spawn.py":
        return XLA_SPAWN, i + 1
    if base in MPI_PROGRAMS:
        return MPI, i + 1
    if base == "horovodrun":
        return HOROVOD, i + 1
    return None


# Options that take no value, so that the word after them is the program (`torchrun -m module`).
SWITCHES = {"-m", "--module", "--no-python", "--no_python", "--standalone", "--use-env", "--use_env", "--multi_gpu",
            "--multi-gpu", "--cpu", "--tpu", "--use_deepspeed", "--use_fsdp", "--allow-run-as-root", "--oversubscribe",
            "--bind-to-core", "--report-bindings", "--tag-output", "--verbose", "-v", "--no_local_rank", "--autotuning"}
PROGRAMS = {"python", "python3", "bash", "sh", "env", "numactl", "nsys"}


def _options(words: list[str], start: int, valued) -> dict[str, tuple[str, str]]:
    """The launcher's options from start to the program it runs: flag -> (value, as written). The flags in
    `valued` always take the next word; a switch never does; another takes the next word unless it looks like
    the program (a script, a path, an interpreter)."""
    found: dict[str, tuple[str, str]] = {}
    i = start
    while i < len(words):
        word = words[i]
        if word in SEPARATORS or not word.startswith("-") or word == "-":
            break  # the program (or the end of the statement): what follows is the program's
        name, eq, value = word.partition("=")
        if eq:
            found.setdefault(name, (value, word))
            i += 1
            continue
        following = words[i + 1] if i + 1 < len(words) else ""
        program = (following.endswith(".py") or following.startswith("/")
                   or following.rsplit("/", 1)[-1] in PROGRAMS)
        if following and following not in SEPARATORS and name not in SWITCHES and (
                name in valued or (not following.startswith("-") and not program)):
            found.setdefault(name, (following, f"{word} {following}"))
            i += 2
        else:
            found.setdefault(name, ("", word))
            i += 1
    return found


def _number(text: str) -> int | None:
    text = text.strip().strip("'\"")
    return int(text) if text.isdigit() and int(text) > 0 else None


def _first(options: dict[str, tuple[str, str]], names) -> tuple[str, str] | None:
    """(value, as written) of the first of these flags that was given."""
    return next((options[name] for name in names if name in options), None)


def _read(launcher: str, options: dict[str, tuple[str, str]]) -> Launch:
    flags = FLAGS[launcher]
    if launcher in (MPI, HOROVOD):
        return _read_mpi(launcher, options)
    per_node = _first(options, flags.get("per_node", ()))
    if per_node is not None:
        value, said = per_node
        return Launch(launcher, said, value, _number(value), launcher == TORCHRUN and value.strip().lower() in PER_GPU)
    include = _first(options, flags.get("include", ()))
    if include is not None:
        value, said = include
        slots = value.split("@")[0].partition(":")[2]
        return Launch(launcher, said, value, len([s for s in slots.split(",") if s.strip()]) or None)
    total = _first(options, flags.get("total", ()))
    if total is not None:
        value, said = total
        machines = _first(options, flags.get("machines", ()))
        count = _number(machines[0]) if machines is not None else 1
        processes = _number(value)
        if machines is not None:
            said += f" {machines[1]}"
        return Launch(launcher, said, value, -(-processes // count) if processes and count else None)
    return Launch(launcher)


def _read_mpi(launcher: str, options: dict[str, tuple[str, str]]) -> Launch:
    flags = FLAGS[launcher]
    per_node = _first(options, flags.get("per_node", ()))
    if per_node is not None:
        return Launch(launcher, per_node[1], per_node[0], _number(per_node[0]))
    mapped = _first(options, flags.get("map_by", ()))
    if mapped is not None and mapped[0].startswith("ppr:") and mapped[0].split(":")[2:3] == ["node"]:
        return Launch(launcher, mapped[1], mapped[0], _number(mapped[0].split(":")[1]))
    total = _first(options, flags["total"])
    if total is None:
        return Launch(launcher)
    value, said = total
    count = _number(value)
    hosts = _first(options, flags["hosts"])
    if hosts is not None:
        said = f"{said} {hosts[1]}"
        if "$" in hosts[0] or "{{" in hosts[0]:
            return Launch(launcher, said, value, None)  # the hosts come later: not known here
        entries = [h for h in hosts[0].split(",") if h.strip()]
        slots = _number(entries[0].partition(":")[2]) if entries and ":" in entries[0] else None
        share = slots if slots else (-(-count // len(entries)) if count and entries else None)
        return Launch(launcher, said, value, min(share, count) if share and count else share)
    if launcher == HOROVOD:
        return Launch(launcher, said, value, count)  # no host named: localhost:np, every process here
    # mpirun with no host named takes them from a hostfile, the environment (the MPI operator's
    # OMPI_MCA_orte_default_hostfile) or the scheduler's allocation (Slurm): not known here.
    return Launch(launcher, said, value, None)


def launch_in_command(command) -> Launch | None:
    """The first launcher the command starts and what its flags say (the first that says anything), or None."""
    words = words_of(command)
    first = None
    for i in range(len(words)):
        started = _start(words, i)
        if started is None:
            continue
        valued = {flag for names in FLAGS[started[0]].values() for flag in names}
        launch = _read(started[0], _options(words, started[1], valued))
        if launch.said:
            return launch
        first = first or launch
    return first
