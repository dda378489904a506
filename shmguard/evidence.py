"""What a container says it runs, by its command, its image and its name: a trainer, a server, or nothing.

The evidence the one pod reader (shmguard.pod) chooses the DataLoader's container by, and the
scope rule (shmguard.manifests.scope) decides whether a template trains by (issue 42: the trainer
is found by what it runs, and affirmative evidence decides "not training"):

- a DataLoader launcher or script in its command: torchrun, `python -m torch.distributed.run`/`launch`,
  `accelerate launch`, deepspeed, horovodrun, xla_spawn.py, torchtune's `tune run`, a `*train*.py` or
  `*finetune*.py` script, a script that imports torch or builds a DataLoader;
- a training name: a word `train`, `trainer`, `training`, `finetune` or `pretrain` in it;
- a server: a database, proxy, operator, hub, exporter or serving runtime, by the words of its image or
  name, or a serving command (`vllm serve`);
- idle: a command that runs only waiting, printing or setting-up programs (`sleep 600`).

Pure functions on a container mapping; standard library only.
"""

from __future__ import annotations

import re

DATALOADER_COMMAND = re.compile(
    r"\btorchrun\b|torch\.distributed\.(?:run|launch)\b|\baccelerate\s+launch\b|\bdeepspeed\b|\bhorovodrun\b"
    r"|[\w./-]*xla_spawn\.py\b|\btune\s+run\b|\bDataLoader\b|^\s*(?:import|from)\s+torch\b"
    r"|[\w./-]*(?:train|finetune|fine_tune|fine-tune|pretrain)[\w.-]*\.py\b"
    r"|-m\s+[\w.]*(?:train|finetune|fine_tune|pretrain)\w*\b", re.IGNORECASE | re.MULTILINE)
TRAINING_WORDS = {"train", "trainer", "training", "finetune", "finetuning", "pretrain", "pretraining"}
def words(container) -> str:
    """A container's command, args and (Argo) script source, as one text."""
    if not isinstance(container, dict):
        return ""
    parts = [str(w) for key in ("command", "args") if isinstance(container.get(key), list) for w in container[key]]
    if isinstance(container.get("source"), str):
        parts.append(container["source"])
    return "\n".join(parts)


def named_training(name) -> bool:
    return bool(name) and bool(TRAINING_WORDS & set(re.split(r"[-_.\s\[\]/]+", str(name).lower())))


def image_words(image) -> tuple[set[str], set[str]]:
    """An image's repository (no registry port, tag or digest) as its path components and their words:
    `k8s.gcr.io/ingress-nginx/controller:v1` -> ({ingress-nginx, controller, ...}, {ingress, nginx, controller, ...})."""
    text = str(image or "").lower().split("@")[0]
    last = text.rsplit("/", 1)
    if ":" in last[-1]:
        text = text[: len(text) - len(last[-1]) + last[-1].index(":")]
    parts = {p for p in text.split("/") if p}
    return parts, {w for p in parts for w in re.split(r"[-_.]+", p) if w}


# What a container is when it is not a trainer, by the words of its image or its name (issue 42: affirmative
# evidence decides "not training"). Each group is said in the reason, with the image.
SERVER_WORDS = {
    "a database": {"postgres", "postgresql", "pgvector", "mysql", "mariadb", "mongo", "mongodb", "redis", "valkey",
                   "etcd", "elasticsearch", "opensearch", "cassandra", "scylla", "clickhouse", "memcached", "kafka",
                   "zookeeper", "rabbitmq", "minio", "qdrant", "weaviate", "milvus", "chromadb", "neo4j", "influxdb",
                   "cockroach", "timescaledb", "xtrabackup"},
    "a proxy or web server": {"nginx", "envoy", "haproxy", "traefik", "httpd", "caddy", "squid", "proxy", "proxyv2",
                              "oauth2", "ingress"},
    "an operator or controller": {"operator", "controller", "scheduler", "webhook", "certgen", "provisioner",
                                  "csi", "registrar", "kubectl", "device-plugin", "cert-manager"},
    "a notebook hub": {"jupyterhub", "k8s-hub"},
    "an exporter or monitoring agent": {"exporter", "prometheus", "alertmanager", "grafana", "pushgateway", "loki",
                                        "promtail", "fluentd", "kibana", "kube-state-metrics", "collector"},
    "a serving runtime": {"vllm", "vllm-openai", "text-generation-inference", "tgi", "tritonserver", "triton",
                          "serving", "torchserve", "kserve", "seldon", "mlserver", "bentoml", "jetstream", "saxml",
                          "ollama", "llama.cpp", "llama-server", "sglang", "lmdeploy", "text-embeddings-inference",
                          "inference", "model-server", "ovms"},
}
SERVING_COMMAND = re.compile(
    r"\bvllm\s+serve\b|vllm\.entrypoints|\btext-generation-launcher\b|\btritonserver\b|\btorchserve\b"
    r"|\bollama\s+serve\b|sglang\.launch_server|\bserve\s+run\b|\bjupyterhub\b|\bllama-server\b|\bmlserver\s+start\b")
NOTEBOOK_IMAGE = re.compile(r"jupyter|notebook", re.IGNORECASE)
NOTEBOOK_COMMAND = re.compile(r"\bjupyter(?:-lab|-notebook)?\s+(?:lab|notebook|server)\b|\bstart-notebook\.sh\b")
# Programs that neither train nor serve: waiting, printing, fetching and setting up. A container whose command
# runs nothing else runs no DataLoader.
IDLE_PROGRAMS = {"sleep", "echo", "true", "pause", "date", "printf", "cat", "tail", "hostname", "ls", "nvidia-smi",
                 "env", "printenv", "whoami", "wait", ":", "exit", "uname", "id", "pwd", "cowsay", "yes"}
SETUP_PROGRAMS = {"pip", "pip3", "mkdir", "cp", "mv", "ln", "rm", "chmod", "chown", "cd", "export", "set", "source",
                  ".", "wget", "curl", "gsutil", "gcloud", "aws", "git", "tar", "unzip", "apt-get", "apt", "touch",
                  "huggingface-cli", "hf", "sed", "tr", "grep", "awk", "find", "test", "[", "[[", "if", "then", "fi",
                  "else", "for", "do", "done", "while", "case", "esac", "mount", "umask", "ulimit"}
IDLE_IMAGES = {"sleep", "pause", "busybox"}  # images whose entrypoint only waits (busybox's is a shell: with no
# command it exits at once)
WAITING_ENTRYPOINTS = {"sleep", "pause"}  # of those, the ones whose args are only the entrypoint's (a duration)
SHELLS = {"sh", "bash", "ash", "dash", "zsh", "ksh"}
PREFIXES = {"exec", "time", "nohup", "sudo", "env", "!", "{", "}", "(", ")"}


def programs(container) -> list[str] | None:
    """The programs a container's command runs, in order (a shell's `-c` script split into its statements), or
    None when it runs its image's entrypoint (no command nor args)."""
    import shlex

    if not isinstance(container, dict):
        return None
    command = container.get("command")
    args = container.get("args")
    line = [str(w) for w in (command if isinstance(command, list) else [command] if command else [])]
    line += [str(w) for w in (args if isinstance(args, list) else [args] if args else [])]
    if isinstance(container.get("source"), str):  # an Argo script: its language runs the source
        return [line[0].rsplit("/", 1)[-1]] if line else ["sh"]
    if not line:
        return None
    first = line[0].rsplit("/", 1)[-1]
    if first in SHELLS:
        flags = [i for i, w in enumerate(line[1:], 1) if w.startswith("-") and "c" in w and not w.startswith("--")]
        if flags and flags[0] + 1 < len(line):
            script = " ; ".join(line[flags[0] + 1:])
            out = []
            for statement in re.split(r"[;&|\n]+|\$\(|`", script):
                try:
                    tokens = shlex.split(statement, comments=True)
                except ValueError:
                    tokens = statement.split()
                while tokens and (tokens[0] in PREFIXES or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0])):
                    tokens = tokens[1:]
                if tokens:
                    out.append(tokens[0].rsplit("/", 1)[-1])
            return out
    return [first]


MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun")


def mpi_launcher(container) -> str | None:
    """The MPI launcher a container's command starts (mpirun, mpiexec), or None."""
    return next((p for p in programs(container) or [] if p in MPI_LAUNCHERS), None)


def idle(container) -> str | None:
    """The evidence that a container runs only waiting, printing or setting-up programs (`sleep 600`), or None."""
    ran = programs(container)
    repo = (str(container.get("image") or "").split("@")[0].rsplit("/", 1)[-1].split(":")[0].lower()
            if isinstance(container, dict) else "")
    if repo in IDLE_IMAGES and ran is None or repo in WAITING_ENTRYPOINTS and not container.get("command"):
        # its entrypoint waits; args alone are that entrypoint's (the `sleep` image's `args: ["10s"]` is a duration)
        return f"its image {container.get('image')} only waits"
    if ran is None:
        return None
    if ran and all(p in IDLE_PROGRAMS or p in SETUP_PROGRAMS for p in ran):
        shown = list(dict.fromkeys(p for p in ran if p not in ("if", "then", "fi", "else", "do", "done", "[", "[[")))
        return f"it runs only {', '.join(shown[:5])}"
    return None


def server(container, name: str) -> str | None:
    """The evidence that a container is a database, proxy, operator, hub, exporter or serving runtime, or None."""
    if not isinstance(container, dict):
        return None
    image = container.get("image")
    parts, image_tokens = image_words(image)
    name_tokens = set(re.split(r"[-_.]+", str(container.get("name") or "").lower())) - {""}
    for what, words_of in SERVER_WORDS.items():
        if what == "a notebook hub" and ("singleuser" in str(image) or NOTEBOOK_COMMAND.search(words(container))):
            continue  # jupyterhub/k8s-singleuser-sample: a user's notebook server, not the hub
        hit = sorted((parts | image_tokens) & words_of)
        if hit:
            return f"{what} (image {image})"
        hit = sorted(name_tokens & words_of)
        if hit and what != "a serving runtime":  # `inference` in a name says less than in an image
            return f"{what} (container {name})"
    match = SERVING_COMMAND.search(words(container))
    if match:
        return f"a serving runtime ({name} runs {match.group(0)})"
    return None


def notebook(container) -> bool:
    """A Jupyter notebook server: by its image (`jupyter/*-notebook`, `*-jupyter`, a JupyterHub single-user image)
    or its command (`jupyter lab`)."""
    if not isinstance(container, dict):
        return False
    image = str(container.get("image") or "")
    if "k8s-hub" in image or server(container, "") and "singleuser" not in image:
        return False  # JupyterHub's hub, or a server that has jupyter in its name
    return bool(NOTEBOOK_IMAGE.search(image) or "singleuser" in image or NOTEBOOK_COMMAND.search(words(container)))
