"""Admission: step 3 of the pipeline (docs/contract.md#step-admission,
docs/contract.md#precedence).

The pre-execute waterfall, approval for ``Ask`` and the guards, run in the
calling thread. Guarantees:

* Policies fail closed: a hook, guard or approver that raises or returns a
  value of the wrong type denies the call (``DENIED``, naming the hook);
  a broken policy never lets a call through.
* A denial settles the call as ``DENIED`` even when the caller aborted
  meanwhile (a denial is more specific than a later cancellation, docs/contract.md#precedence).
  Cancellation observed between the phases (and an approval answered
  ``"cancelled"`` after the caller aborted, or an ``AbortError`` from a
  hook while the caller is aborted) settles ``ABORTED_BEFORE_DISPATCH``.
* An approver's ``"deferred"`` settles the call ``APPROVAL_PENDING`` with a
  ticket from the registry's ``ApprovalTickets`` (docs/policies.md#deferred-approval);
  a ticket that cannot be issued denies the call (fail closed). A resumed
  call (``admit_resumed``) skips the pre-execute waterfall and the approver,
  which decided already, and goes on with the guards.
* An unknown tool is not this step's decision: the registry settles it
  ``UNKNOWN_TOOL`` after the hooks ran (they see ``definition is None`` and
  may deny first). Every outcome of this step still passes through
  post-execute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final, Generic, TypeVar, cast

import attrs

from .._core.errors import AbortError, safe_repr, safe_str, safe_type_name
from .._types.calls import aborted
from .._types.hooks import Allow, ApprovalRequest, Approver, Ask, Deny, PreExecuteDecision, ResumeDecision
from .._types.tools import ToolExecution
from .outcome import denied, unknown_tool
from .run import Run
from .tickets import ApprovalTickets, pending

__all__ = ["ALLOW", "HookReturnError", "Waterfall", "admit", "admit_resumed", "describe"]

ALLOW: Final = Allow()
_D = TypeVar("_D")


class HookReturnError(Exception):
    """A hook returned a value of the wrong type."""


def describe(fn: Callable[..., object] | object) -> str:
    """A hook's name for messages; never runs a foreign ``__repr__`` and never
    raises (docs/contract.md#a4)."""
    try:
        name = getattr(fn, "__qualname__", None)
    except Exception:
        name = None
    return name if type(name) is str and name else safe_type_name(fn)


@attrs.define(eq=False)
class Waterfall(Generic[_D]):
    """A chain of hooks, each given ``next`` (docs/contract.md#hooks): hook
    ``i`` is called as ``hooks[i](*args, next)``, where ``next()`` runs hook
    ``i + 1`` and returns its decision; after the last hook, ``next()``
    returns ``end()``. Each hook's return must be an instance of
    ``expected`` (else ``HookReturnError`` naming the hook); ``gate``, when
    given, runs before each step and may raise (a ``next()`` called too
    late). Runs in the thread that calls ``at(0)`` (or a hook's ``next()``).

    The ``next`` callables (partials of ``at``) refer to the waterfall,
    never the other way round, so a finished call leaves no reference cycle behind (its objects
    are freed at once, not by the cyclic garbage collector)."""

    _what: str
    _hooks: Sequence[Callable[..., Any]]
    _args: tuple[object, ...]
    _end: Callable[[], _D]
    _expected: tuple[type, ...]
    _gate: Callable[[], None] | None = None

    def at(self, i: int) -> _D:
        """Hook ``i``'s decision: ``at(0)`` runs the chain (``end()`` when
        there are no hooks)."""
        gate = self._gate
        if gate is not None:
            gate()
        hooks = self._hooks
        if i == len(hooks):
            return self._end()
        fn = hooks[i]
        # `next` is a partial of this waterfall's bound method: it refers
        # to the waterfall, which never refers to it.
        decision = fn(*self._args, partial(self.at, i + 1))
        if isinstance(decision, self._expected):
            return cast(_D, decision)
        names = [t.__name__ for t in self._expected]
        expected = names[-1] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        raise HookReturnError(f"{self._what} {describe(fn)} returned {type(decision).__name__}, expected {expected}")


def _allow() -> PreExecuteDecision:
    return ALLOW


def _cancelled(run: Run) -> bool:
    """Settle ``ABORTED_BEFORE_DISPATCH`` when the caller aborted (observed in step 3)."""
    signal = run.call.signal
    if signal.aborted:
        run.settle(aborted(signal.reason, invoked=False), skip_post=False)
        return True
    return False


def _hook_fault(run: Run, what: str, exc: Exception) -> None:
    # An AbortError while the caller is aborted is cancellation observed;
    # anything else fails closed (a broken policy never lets a call through).
    if isinstance(exc, AbortError) and _cancelled(run):
        return
    run.settle(denied(f"{what} failed: {safe_type_name(exc)}: {safe_str(exc)}"), skip_post=False)


def admit(run: Run, approver: Approver | None, tickets: ApprovalTickets) -> None:
    """Admission (docs/contract.md#step-admission) for ``run`` (in the calling thread),
    called only when the registry has a pre-execute hook or a guard; leaves
    ``run.result`` unset when the call may go on."""
    hooks = run.hooks
    view = run.view
    # Pre-execute waterfall.
    pre = hooks.pre_execute
    decision: PreExecuteDecision = ALLOW
    if pre:
        try:
            decision = Waterfall("pre-execute hook", pre, (view,), _allow, (Allow, Deny, Ask)).at(0)
        except HookReturnError as exc:
            run.settle(denied(str(exc)), skip_post=False)
            return
        except Exception as exc:
            _hook_fault(run, "pre-execute hook", exc)
            return
    if isinstance(decision, Deny):
        run.settle(denied(decision.reason), skip_post=False)
        return
    if _cancelled(run):
        return
    if isinstance(decision, Ask):
        if not _approve(run, approver, tickets, view, decision):
            return
        if _cancelled(run):
            return
    if hooks.guards:
        _guard(run)
    else:
        _cancelled(run)  # the last cancellation check of step 3


def admit_resumed(decision: ResumeDecision, reason: str | None, run: Run) -> None:
    """Step 3 of a call resumed from its ticket: the approver's answer is
    ``decision``; ``"rejected"`` denies it as the approver would have,
    ``"allowed-once"`` goes on with the guards."""
    if decision == "rejected":
        run.settle(denied(_rejection(reason)), skip_post=False)
        return
    if not _cancelled(run):
        _guard(run)


def _rejection(reason: str | None) -> str:
    return "tool call was rejected" + (f": {reason}" if reason else "")


def _guard(run: Run) -> None:
    """The guards, then the last cancellation check of step 3."""
    for guard in run.hooks.guards:
        try:
            verdict = guard(run.view)
        except Exception as exc:
            _hook_fault(run, f"guard {describe(guard)}", exc)
            return
        if verdict is None:
            continue
        if isinstance(verdict, str):
            run.settle(denied(verdict or f"denied by guard {describe(guard)}"), skip_post=False)
        else:
            run.settle(
                denied(f"guard {describe(guard)} returned {type(verdict).__name__}, expected str or None"),
                skip_post=False,
            )
        return
    _cancelled(run)


def _approve(run: Run, approver: Approver | None, tickets: ApprovalTickets, view: ToolExecution, ask: Ask) -> bool:
    """Ask the approver; True to proceed, else the run is settled."""
    if approver is None:
        run.settle(
            denied(ask.reason or f'tool "{run.call.name}" needs approval and no approver is configured'),
            skip_post=False,
        )
        return False
    request = ApprovalRequest(view, ask.reason, run.call.signal)
    try:
        answer = approver(request)
    except Exception as exc:
        _hook_fault(run, "approver", exc)
        return False
    if type(answer) is str:
        if answer == "allowed-once":
            return True
        if answer == "cancelled":
            if not _cancelled(run):
                run.settle(denied("approval was cancelled"), skip_post=False)
            return False
        if answer == "rejected":
            run.settle(denied(_rejection(ask.reason)), skip_post=False)
            return False
        if answer == "deferred":
            if not _cancelled(run):
                _defer(run, tickets, ask.reason)
            return False
        if answer == "unavailable":
            run.settle(denied("approval is unavailable"), skip_post=False)
            return False
    run.settle(
        denied(
            f"approver returned {safe_repr(answer)}, expected one of allowed-once, rejected, cancelled, unavailable, deferred"
        ),
        skip_post=False,
    )
    return False


def _defer(run: Run, tickets: ApprovalTickets, reason: str | None) -> None:
    """Settle ``APPROVAL_PENDING`` with a new ticket for the call."""
    call = run.call
    definition = run.definition
    if definition is None:  # nothing to resume: an unknown tool stays one
        run.settle(unknown_tool(call.name), skip_post=False)
        return
    try:
        ticket = tickets.issue(
            definition, call.call_id, run.arguments, call.agent, call.root_call_id, reason, call.session
        )
    except Exception as exc:
        run.settle(
            denied(f"approval ticket could not be issued: {safe_type_name(exc)}: {safe_str(exc)}"), skip_post=False
        )
        return
    run.settle(pending(call.name, reason, ticket), skip_post=False)
