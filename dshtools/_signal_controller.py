"""``AbortController``: the owner of a signal and of the right to abort it
(docs/contract.md §1).

Guarantees: of many concurrent ``abort()`` calls exactly one wins and the
rest return at once; the winner makes the signal (and, through
``_signal_links``, every signal derived from it) read aborted before any
listener runs, then runs the listeners in the calling thread, each claimed
by one atomic pop; a ``KeyboardInterrupt``/``SystemExit`` from a listener
is re-raised after every listener ran.

Relies on: the abort decision and claim of ``_signal_claim`` (one
``dict.setdefault`` of ``_ABORTED`` wins; one ``dict.pop`` claims each
listener) and the "abort vs add_listener / wait / derive" atomicity
assumptions listed in ``_signal_surface``: ``abort()`` stores ``_ABORTED``,
then ``_reason`` and ``_aborted``, and only then reads the dependents, the
``Event`` and the listener keys. ``abort()`` is ``_abort_plain`` and the
common case of ``_won_plain``, inlined: keep them in step.
"""

from __future__ import annotations

from typing import Final

from ._errors import report_unraisable, safe_repr
from ._signal_claim import _ABORTED, _DEFAULT_REASON, _NONES
from ._signal_links import _won_plain
from ._signal_surface import AbortSignal, _new_signal

__all__ = ["AbortController"]


class AbortController:
    """Owns an ``AbortSignal`` and the right to abort it.

    ``abort(reason=None)``: the first call wins and sets ``signal.reason``
    (``None`` means a default ``AbortError()``; ``0``, ``""``, ``False`` are
    kept as given); later calls do nothing. Listeners run in the calling
    thread before ``abort`` returns. Source: docs/contract.md §1.
    """

    __slots__ = ("signal",)

    def __init__(self) -> None:
        # `AbortSignal()`, inlined (creating a controller is a hot path).
        signal = _new_signal(AbortSignal)
        signal._linked = False
        signal._aborted = False
        signal._reason = None
        signal._event = None
        signal._listeners = {}
        signal._deps = None
        self.signal: Final = signal

    def abort(self, reason: object = None) -> None:
        # `_abort_plain` and the common case of `_won_plain`, inlined: this
        # is the abort of almost every signal.
        signal = self.signal
        listeners = signal._listeners
        if reason is None:
            reason = _DEFAULT_REASON  # the AbortError is made when first read
        token = (reason,)
        if listeners.setdefault(_ABORTED, token) is not token:
            return  # aborted before: this call does nothing
        signal._reason = reason
        signal._aborted = True
        if signal._deps:
            _won_plain(signal, listeners, token)
            return
        event = signal._event
        if event is not None:
            event.set()
        if len(listeners) == 1:
            return
        # One atomic copy: the dict may change size under us (late adders,
        # removers on other threads), so it is never iterated directly.
        keys = list(listeners)
        if len(keys) == 2 and keys[1] is _ABORTED:
            # One listener: no iterator.
            callback = listeners.pop(keys[0], None)
            if callback is not None:
                try:
                    callback(signal)
                except Exception as exc:
                    report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), signal)
            return
        if keys[-1] is _ABORTED:
            del keys[-1]
        else:
            keys.remove(_ABORTED)
        interrupt: BaseException | None = None
        for callback in map(listeners.pop, keys, _NONES):  # `_dispatch`, inlined
            if callback is None:
                continue
            try:
                callback(signal)
            except Exception as exc:
                report_unraisable(exc, "Exception in abort listener " + safe_repr(callback), signal)
            except BaseException as exc:
                if interrupt is None:
                    interrupt = exc
        if interrupt is not None:
            raise interrupt

    def __repr__(self) -> str:
        return f"<AbortController signal={self.signal!r}>"
