"""Typing contract of the cancellation primitive (docs/contract.md#cancellation), checked by
mypy (strict, warn_unused_ignores) from tests/typing/test_case_files.py. Lines without
an ignore must type-check; every ``# type: ignore[...]`` marks an error mypy
must report - if it disappeared, ``warn_unused_ignores`` fails the run.
Not imported at run time (the file name does not start with ``test_``)."""

from __future__ import annotations

from typing_extensions import assert_type

from dshtools import (
    AbortController,
    AbortError,
    AbortSignal,
    Deadline,
    ListenerHandle,
    TimeoutReason,
    deadline,
    timeout_of,
)


def on_abort(signal: AbortSignal) -> None:
    pass


def returns_something(signal: AbortSignal) -> int:
    return 1


def wrong_parameter(value: int) -> None:
    pass


def accepted_usage() -> None:
    controller = AbortController()
    signal = controller.signal
    assert_type(signal, AbortSignal)
    controller.abort()
    controller.abort("why")
    controller.abort(reason=ValueError("why"))
    assert_type(signal.aborted, bool)
    assert_type(signal.reason, object)
    signal.throw_if_aborted()
    assert_type(signal.wait(), bool)
    assert_type(signal.wait(0.5), bool)
    assert_type(signal.wait(1), bool)
    assert_type(signal.wait(timeout=None), bool)
    assert_type(signal.listener_count, int)
    assert_type(signal.deadline, float | None)
    assert_type(signal.time_left(), float | None)
    budget = AbortSignal.any_of([signal, AbortSignal.timeout(2.0)]).time_left()
    if budget is not None:
        assert_type(budget, float)

    handle = signal.add_listener(on_abort)
    assert_type(handle, ListenerHandle)
    assert_type(handle.registered, bool)
    handle.remove()
    signal.add_listener(returns_something, run_if_aborted=False)  # any return type
    signal.add_listener(lambda s: print(s.reason))
    with signal.add_listener(on_abort) as entered:
        assert_type(entered, ListenerHandle)

    derived = AbortSignal.any_of([signal, AbortSignal.timeout(1.0)])
    assert_type(derived, AbortSignal)
    assert_type(AbortSignal.any_of(s for s in (signal,)), AbortSignal)
    assert_type(AbortSignal.any_of(()), AbortSignal)
    assert_type(AbortSignal.timeout(0), AbortSignal)
    assert_type(AbortSignal.already_aborted(), AbortSignal)
    assert_type(AbortSignal.already_aborted("reason"), AbortSignal)
    with derived as same:
        assert_type(same, AbortSignal)
    derived.close()

    error = AbortError()
    assert_type(AbortError("why").reason, object)
    assert_type(error, AbortError)
    reason = TimeoutReason("TOOL_TIMEOUT", 1.5)
    assert_type(reason.code, str)
    assert_type(reason.seconds, float)
    timeout_error: TimeoutError = reason
    exception: Exception = error

    armed = deadline(signal, 1.0, "TOOL_TIMEOUT")
    assert_type(armed, Deadline)
    assert_type(armed.signal, AbortSignal)
    assert_type(armed.timed_out, bool)
    armed.close()
    deadline(None, None, "T").close()
    with deadline(None, 2, "T") as entered_deadline:
        assert_type(entered_deadline, Deadline)

    assert_type(timeout_of(signal), TimeoutReason | None)
    assert_type(timeout_of(error, "TOOL_TIMEOUT"), TimeoutReason | None)
    del timeout_error, exception


def rejected_usage(signal: AbortSignal, handle: ListenerHandle) -> None:
    controller = AbortController()
    controller.abort("a", "b")  # type: ignore[call-arg]
    controller.signal = AbortSignal()  # type: ignore[misc]
    signal.aborted = True  # type: ignore[misc]
    signal.reason = "x"  # type: ignore[misc]
    signal.listener_count = 0  # type: ignore[misc]
    signal.deadline = 1.0  # type: ignore[misc]
    signal.time_left(1.0)  # type: ignore[call-arg]
    signal.time_left() + 1.0  # type: ignore[operator]
    handle.registered = True  # type: ignore[misc]
    signal.add_listener(on_abort, False)  # type: ignore[call-arg]
    signal.add_listener(wrong_parameter)  # type: ignore[arg-type]
    signal.add_listener("not callable")  # type: ignore[arg-type]
    signal.wait("1")  # type: ignore[arg-type]
    AbortSignal.any_of(signal)  # type: ignore[arg-type]
    AbortSignal.any_of([signal, "x"])  # type: ignore[list-item]
    AbortSignal.timeout("1")  # type: ignore[arg-type]
    AbortSignal.timeout(None)  # type: ignore[arg-type]
    TimeoutReason("TOOL_TIMEOUT")  # type: ignore[call-arg]
    TimeoutReason(1.5, "TOOL_TIMEOUT")  # type: ignore[arg-type]
    deadline(signal, 1.0, 5)  # type: ignore[arg-type]
    deadline("signal", 1.0, "T")  # type: ignore[arg-type]
    deadline(signal, "1", "T")  # type: ignore[arg-type]
    timeout_of("TIMEOUT")  # type: ignore[arg-type]
