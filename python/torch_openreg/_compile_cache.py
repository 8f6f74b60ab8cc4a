"""openreg's build in torch.compile's cache keys.

Note [openreg in torch.compile's cache keys]
torch.compile's on-disk caches (AOTAutograd's and Inductor's FX graph cache) key on torch's own code,
the traced graph and the configs, not on what a device's kernels did while AOTAutograd traced that graph
through the dispatcher. So a graph compiled under one build of torch_openreg was served to another
from the cache: after openreg's SDPA began calling CUDA's flash op, a warm cache still ran the graph
compiled when it called another op, which the new build no longer has ("not implemented"). On CUDA a
new torch changes the key; a new torch_openreg did not. torch's documented way to break caches is
``torch.compiler.config.cache_key_tag`` (TORCH_COMPILE_CACHE_KEY_TAG): openreg appends its build's
fingerprint to it (size and modification time of its two libraries, and of this package's code
generation module), keeping whatever tag the user set.
"""

from __future__ import annotations

import hashlib
import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_BUILD_FILES = (
    os.path.join(_HERE, "lib", "libopenreg_backend.so"),
    os.path.join(_HERE, "lib", "libopenreg_sim.so"),
    os.path.join(_HERE, "_inductor", "__init__.py"),
)


def fingerprint() -> str:
    """A short hash of this build of torch_openreg (cheap: file metadata, not contents)."""
    h = hashlib.sha1()
    for path in _BUILD_FILES:
        try:
            st = os.stat(path)
        except OSError:
            continue  # a layout without that file: the others still tell builds apart
        h.update(f"{os.path.basename(path)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]


def tag_compile_caches() -> None:
    """Adds this build's fingerprint to torch.compile's cache key tag (idempotent)."""
    from torch.compiler import config

    mine = f"torch_openreg-{fingerprint()}"
    current = config.cache_key_tag
    if mine not in current.split("|"):
        config.cache_key_tag = f"{current}|{mine}" if current else mine
