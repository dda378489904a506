"""The most open files an engine lets a container have, found by asking the engine itself.

A container whose `nofile` ulimit is above what the runtime may set does not start
at all (`error setting rlimit type 7: operation not permitted`, exit 125). That
ceiling is the runtime's own hard limit when it cannot raise it (a dockerd started
from a shell inherits the shell's, 20,000 here), or the kernel's nr_open when it
can (Docker's systemd unit): nothing on the client side tells which, and a remote
engine or Podman has its own. So it is asked: a probe container of the job's image,
with the limit to try and an entrypoint that does not exist, is started. The runtime
sets the rlimits before it looks for the entrypoint, so "no such file" means the
limit was granted and "setting rlimit" that it was not; nothing runs, and the probe
is removed whatever happens.
"""

from __future__ import annotations

import resource

from shmguard.sizing import NOFILE_COMMON_SOFT

PROBE_ENTRYPOINT = "/nonexistent/shmguard-nofile-probe"


def grants(client, image_id: str, limit: int) -> bool | None:
    """Whether the engine starts a container with nofile=limit:limit; None when the answer says neither."""
    import docker
    from shmguard.engine.run import created

    with created(client, image_id, entrypoint=[PROBE_ENTRYPOINT], command=[], network_disabled=True,
                 labels={"org.shmguard.probe": "nofile"},
                 ulimits=[docker.types.Ulimit(name="nofile", soft=limit, hard=limit)]) as probe:
        try:
            probe.start()
        except docker.errors.APIError as exc:
            text = str(exc.explanation or exc).lower()
            if "rlimit" in text:
                return False
            if "no such file" in text or "not found" in text:
                return True
            return None
        return True  # it started (an image that has the path): the limit was set


def ceiling(client, image_id: str, wanted: int) -> int:
    """The largest open-file limit up to `wanted` the engine gives a container: `wanted` when it gives that;
    else found between the common default (1024) and it, trying this process's own hard limit first (an engine
    started from the same shell has the same one); 0 when it gives not even 1024 (then set none)."""
    if grants(client, image_id, wanted) is not False:
        return wanted
    low, high = 0, wanted  # low: known granted (0: none known); high: known refused
    own = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if NOFILE_COMMON_SOFT <= own < wanted:
        if grants(client, image_id, own) is False:
            high = own
        else:
            low = own
            if grants(client, image_id, own + 1) is False:
                return own
    if low == 0:
        if grants(client, image_id, NOFILE_COMMON_SOFT) is False:
            return 0
        low = NOFILE_COMMON_SOFT
    while high - low > max(1, low // 16):  # within 6%: enough for a limit whose need is an estimate
        middle = (low + high) // 2
        if grants(client, image_id, middle) is False:
            high = middle
        else:
            low = middle
    return low
