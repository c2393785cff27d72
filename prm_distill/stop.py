"""SIGTERM and SIGINT for every command: a stop request that long jobs honour at their next safe point.

`cli.main` installs the handler for the command's lifetime (`handle_signals`; a job called from
Python installs it for its cooperative section). Inside a
`cooperative()` section (the training loop, rollout's shard loop, a labeling job) the first signal
only sets the request: the job finishes the unit in hand, keeps it (train saves a resumable
checkpoint, rollout writes the shard, labeling caches the answers in flight) and raises
`Interrupted` from `check()`. Outside such a section, or on a second signal, `Interrupted` is raised
at once; atomic writers and append-only logs make that safe. Either way the command exits 130.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .exits import Interrupted

log = logging.getLogger("prm_distill.stop")
SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _State:
    def __init__(self) -> None:
        self.requested: str | None = None  # the name of the signal that asked to stop
        self.sections: list[Callable[[], object] | None] = []  # active cooperative sections, innermost last
        self.installed = 0  # nesting depth of handle_signals: only the outermost installs and restores


_state = _State()


def requested() -> bool:
    """A stop was asked for (and not yet honoured by leaving `handle_signals`)."""
    return _state.requested is not None


def check(what: str = "") -> None:
    """Raise `Interrupted` when a stop was requested: call it where the work so far is kept."""
    if _state.requested is not None:
        raise Interrupted(f"stopped by {_state.requested}" + (f" {what}" if what else ""))


def request(name: str = "a stop request") -> None:
    """Ask the running job to stop at its next safe point (what the signal handler does; also for
    embedding code and tests that run a job in-process)."""
    _state.requested = name
    for callback in list(_state.sections):
        if callback is not None:
            callback()


def _handler(signum: int, frame: Any) -> None:
    name = signal.Signals(signum).name
    again = _state.requested is not None
    request(name)
    if again or not _state.sections:
        raise Interrupted(f"stopped by {name}")
    log.warning("%s: stopping at the next safe point, keeping the work done so far (send it again to stop at once)", name)


@contextmanager
def handle_signals() -> Iterator[None]:
    """Install the handler for SIGTERM and SIGINT (main thread only), restore the previous ones after.
    Nested uses (a job run from `cli.main`, or called from Python) share the outermost one."""
    if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
        yield
        return
    if _state.installed:
        _state.installed += 1
        try:
            yield
        finally:
            _state.installed -= 1
        return
    previous = {sig: signal.getsignal(sig) for sig in SIGNALS}
    _state.requested = None
    for sig in SIGNALS:
        signal.signal(sig, _handler)
    _state.installed = 1
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _state.requested, _state.installed = None, 0


@contextmanager
def cooperative(on_request: Callable[[], object] | None = None) -> Iterator[None]:
    """While inside, a first signal only requests the stop (and calls `on_request`, e.g. to set an
    asyncio event); the code inside calls `check()` at its safe points. Installs the handler when no
    one has (a job called from Python rather than from `cli.main`)."""
    with handle_signals():
        _state.sections.append(on_request)
        try:
            if on_request is not None and _state.requested is not None:
                on_request()
            yield
        finally:
            _state.sections.pop()  # sections nest: the innermost one ends first
