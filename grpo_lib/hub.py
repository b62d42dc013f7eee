"""The Hugging Face hub, reached or not: where it is out of reach, fail in a second.

The book runs offline. Only chapter 21's recipe (``Qwen/Qwen2.5-0.5B-Instruct`` on
GSM8K) loads from the hub. Where the hub cannot be reached, ``huggingface_hub`` tries
each file six times with back-off (about 23 s a file, one warning line a try) before
``transformers`` or ``datasets`` give up: a model and its tokenizer cost a reader 50 s
of retries before the error. :func:`hub_access` decides once whether the hub can be
reached and, where it cannot, runs its body in the libraries' own offline mode. Files
already in the local cache still load, and a missing one fails at once, with the
caller's message.

The hub counts as out of reach when the environment asks for offline mode *now*
(``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE`` or ``TRANSFORMERS_OFFLINE``; the libraries
read these once, at import), or when its host does not accept a connection within a few
seconds. Behind a proxy (``HTTPS_PROXY``) a direct connection proves nothing, so the
host is not tried there.
"""
from __future__ import annotations

import contextlib
import functools
import os
import socket
import sys
import threading
from urllib.parse import urlsplit

__all__ = ["OFFLINE_VARIABLES", "offline_requested", "hub_reachable", "hub_access"]

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
"""Environment variables that switch the Hugging Face libraries to offline mode."""
_TRUE = {"1", "ON", "YES", "TRUE"}
_PROXIES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def offline_requested() -> bool:
    """Whether one of :data:`OFFLINE_VARIABLES` is set to a true value at this call."""
    return any(os.environ.get(name, "").upper() in _TRUE for name in OFFLINE_VARIABLES)


def _connects(host: str, port: int, timeout: float) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:  # no DNS, refused, unreachable, timed out
        return False


@functools.lru_cache(maxsize=None)
def _answers(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` accepts a connection within ``timeout`` seconds, the
    name's lookup included (a socket's timeout does not cover a hanging resolver, so
    the attempt runs in a daemon thread that is left behind if it hangs)."""
    result: list[bool] = []
    worker = threading.Thread(target=lambda: result.append(
        _connects(host, port, timeout)), daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(result and result[0])


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub's host (``HF_ENDPOINT``, by default huggingface.co) accepts a
    TCP connection within ``timeout`` seconds; asked once per host and process. True
    behind a proxy, where only the proxy can tell."""
    from huggingface_hub import constants

    if any(os.environ.get(name) for name in _PROXIES):
        return True
    url = urlsplit(constants.ENDPOINT)
    if not url.hostname:
        return False
    port = url.port or (443 if url.scheme == "https" else 80)
    return _answers(url.hostname, port, timeout)


@contextlib.contextmanager
def hub_access(timeout: float = 3.0):
    """Run the ``with`` body online where the hub can be reached, else with
    ``huggingface_hub``, ``transformers`` and ``datasets`` in offline mode (cached files
    load, missing ones fail without retries). Yields whether the body runs online."""
    if not offline_requested() and hub_reachable(timeout):
        yield True
        return
    from huggingface_hub import constants

    switches = [(constants, "HF_HUB_OFFLINE")]
    if "datasets" in sys.modules:  # its config copied the flag when it was imported
        config = sys.modules["datasets"].config
        names = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
        switches += [(config, name) for name in names if hasattr(config, name)]
    before = [getattr(module, name) for module, name in switches]
    for module, name in switches:
        setattr(module, name, True)
    try:
        yield False
    finally:
        for (module, name), value in zip(switches, before):
            setattr(module, name, value)
