"""When the interpreter begins to exit: the end of the program's own work.

CPython's finalization first calls ``threading._shutdown`` (looked up on the ``threading`` module
at that moment: it joins the program's non-daemon threads), then the ``atexit`` handlers, the
observation's own last. Wrapping it marks the moment the main module returned or raised (an
``exiting`` event): what follows to the end of the observation is exit work (threads joined,
``atexit`` handlers such as inductor's compile-worker shutdown), the time split's exit share.
Checked on CPython 3.10 to 3.12.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from xlabridge.diagnostics import events as ev
from xlabridge.diagnostics._observe import recorder as _recorder
from xlabridge.diagnostics._observe.probes import Installation, ProbeInfo

INFO = ProbeInfo(
    name="python.exit",
    surface="threading._shutdown (wrapped; CPython calls it first when the interpreter exits)",
    checked="Python 3.10-3.12",
    patch=True,
    why="atexit handlers run in reverse order of registration, so one registered at start-up runs last: "
    "only the interpreter's first step of finalization tells when the program's own work ended",
    sees="when the program's own work ended, and so its exit work (the exit share)",
)


def _wrap(original: Any) -> Any:
    def _shutdown(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is threading.main_thread() and _recorder.active():
            now = time.monotonic()
            _recorder.safely(INFO.name, "marking the start of the exit",
                             lambda: _recorder.emit(ev.Exiting(**_recorder.stamp(now))))
        return original(*args, **kwargs)

    return _shutdown


def install(installation: Installation) -> None:
    if callable(getattr(threading, "_shutdown", None)):
        installation.replace(threading, "_shutdown", _wrap)
