"""Small pieces shared by ``dshtools.io`` and its private halves
(``dshtools._io.process``, ``dshtools._io.http``): the path type, the chunk size
of pipe and socket reads, and the ``AbortError`` a helper raises on abort.
No state, no threads.
"""

from __future__ import annotations

import os
from typing import Final, Union

from .._core.errors import AbortError
from .._signal import AbortSignal

# Bytes per os.read/os.write on a child's pipes and per read of an HTTP body.
_PIPE_CHUNK: Final = 64 * 1024

StrPath = Union[str, "os.PathLike[str]"]


def _abort_error(signal: AbortSignal) -> AbortError:
    return AbortError(signal.reason)
