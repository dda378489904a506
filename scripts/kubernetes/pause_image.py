"""Wrap a static pause binary as a one-layer image archive (Docker's `docker save` format) for `ctr images import`.

containerd's CRI makes a sandbox for every Pod from this image; with no registry here it is built from
Kubernetes' own build/pause/linux/pause.c and imported under a local name, so nothing is ever pulled.

Usage: pause_image.py PAUSE_BINARY IMAGE_NAME OUTPUT.tar
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
import tempfile


def _tar_bytes(members: list[tuple[str, bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data, mode in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def pause_archive(binary: bytes, image: str) -> bytes:
    layer = _tar_bytes([("pause", binary, 0o755)])
    layer_digest = hashlib.sha256(layer).hexdigest()
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
        "config": {"Entrypoint": ["/pause"], "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{layer_digest}"]},
    }, sort_keys=True).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [image],
                            "Layers": [f"{layer_digest}/layer.tar"]}]).encode()
    return _tar_bytes([(config_name, config, 0o644), (f"{layer_digest}/layer.tar", layer, 0o644),
                       ("manifest.json", manifest, 0o644)])


if __name__ == "__main__":
    binary_path, image, output = sys.argv[1:4]
    with open(binary_path, "rb") as f:
        data = pause_archive(f.read(), image)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(output)))
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, output)
