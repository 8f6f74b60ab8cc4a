"""The address the group's gloo listens on and gives its peers, chosen from the rendezvous host.

Note [Which address gloo listens on]
gloo's transport listens on one address per process and publishes it in the store; every peer
connects to it. Left to itself, gloo takes the address the machine's hostname resolves to, which in
containers and on many distributions (``127.0.1.1 <hostname>`` in /etc/hosts) is a loopback address:
a peer on another host then connects to its own loopback, and the group hangs with no message.
The rendezvous store's host says which network the group lives on, so openreg's groups choose:
- ``GLOO_SOCKET_IFNAME`` set: gloo's own choice (the user named the interfaces);
- the store's host resolves to an address that is not loopback: the local address of the route
  to it (a UDP socket's ``connect`` picks it; nothing is sent). On the store's host itself this is the
  address the store was reached at; on the others, the address of the interface facing it;
- the store's host resolves to loopback: this process runs on the store's host. A peer on another
  host reached the store at an address of this host, so each rank publishes the address it resolved
  the store's host to (empty when loopback) in the group's store, and a rank on the store's host
  listens on the one most peers used. When every rank saw loopback, all run on one host and gloo's
  own choice serves (loopback is reachable by all).
Every rank of a group takes part in its creation anyway (gloo connects a full mesh), so the wait for
the others' addresses adds no new wait. A gloo group that c10d creates itself (``backend="gloo"``,
``"cpu:gloo,..."``) keeps gloo's choice, as it does with CUDA; ``GLOO_SOCKET_IFNAME`` sets it.
"""

from __future__ import annotations

import collections
import ipaddress
import os
import socket
from datetime import timedelta

import torch.distributed as dist

_KEY_PREFIX = "openreg/gloo_address/"


def _store_host(store) -> str | None:
    """The host of the TCPStore under ``store``'s prefixes, or None (a file or hash store: one host)."""
    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    if isinstance(store, dist.TCPStore):
        return store.host
    return None


def _resolve(host: str) -> tuple[int, str] | None:
    """(address family, address) of ``host`` as a TCP client resolves it first, or None."""
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return None
    for family, _, _, _, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6):
            return family, str(sockaddr[0])
    return None


def _source_address(family: int, address: str) -> str | None:
    """The local address of the route to ``address`` (a UDP connect sends nothing), or None."""
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((address, 9))
            return str(s.getsockname()[0])
    except OSError:
        return None


def gloo_device(store, rank: int, size: int, timeout: timedelta):
    """The transport device for a group's gloo over ``store``, or None for gloo's own choice (see
    Note [Which address gloo listens on]). Called by every rank of the group."""
    if os.environ.get("GLOO_SOCKET_IFNAME"):
        return None
    host = _store_host(store)
    if host is None:
        return None
    resolved = _resolve(host)
    remote = resolved is not None and not ipaddress.ip_address(resolved[1].split("%")[0]).is_loopback
    exchange = dist.PrefixStore(_KEY_PREFIX, store)
    exchange.set(str(rank), resolved[1] if remote and resolved is not None else "")
    if remote and resolved is not None:
        local = _source_address(*resolved)
        return None if local is None else dist.ProcessGroupGloo.create_device(hostname=local)
    # This process runs on the store's host: listen where the peers on other hosts reached it.
    keys = [str(r) for r in range(size)]
    exchange.wait(keys, timeout)
    seen = collections.Counter(a for a in (exchange.get(k).decode() for k in keys) if a)
    if not seen:
        return None
    address = seen.most_common(1)[0][0]
    # An address the peers reach this host at but that is not this host's own (a forwarded port)
    # cannot be listened on: gloo's own choice then, as before.
    return dist.ProcessGroupGloo.create_device(hostname=address) if _bindable(address) else None


def _bindable(address: str) -> bool:
    resolved = _resolve(address)
    if resolved is None:
        return False
    try:
        with socket.socket(resolved[0], socket.SOCK_STREAM) as s:
            s.bind((resolved[1], 0))
        return True
    except OSError:
        return False
