"""Tool bodies as Ray tasks: ``RayBackend``
(docs/contract.md#backends, docs/contract.md#ray).

``ToolRegistry(backend=RayBackend())`` runs every tool body as a Ray task on
the cluster ``ray.init()`` connected this process to, or on a local Ray that
the backend starts (``ray.init()`` with no arguments) at its first call when
none is connected. It keeps the contract of the thread backend:

* **The signal travels.** Each backend owns one small threaded actor, the
  *signal actor*. The caller-side abort of
  ``run.signal`` sends the reason to it (one actor call, from the thread
  that aborted). Every worker process that ran a body of the backend is
  subscribed and keeps one ``watch`` call outstanding; the abort returns
  those calls, and in the worker running the body a thread started for it
  aborts its local ``run.signal`` (the same reason when it pickles, else its
  ``repr`` as a string; the body's listeners run there). Nothing polls;
  nothing is injected into the body.
* **One claim decides, inside the worker.** A task claims its call in the
  worker process that runs it, under one lock with the delivery of that
  call's abort: an abort that reached the process first (or was there when
  the process subscribed) makes the claim fail and the body never runs
  (``NotInvoked``: ``ABORTED_BEFORE_DISPATCH``); otherwise the body runs
  and the abort is delivered to it. The abort also withdraws the task with
  ``ray.cancel(force=False)``: Ray drops it if it is still queued, and the
  worker's interrupt guard turns Ray's interrupt of a running task into a
  failed claim before the claim and ignores it after, so it never lands in
  a body. A call that is not aborted costs no actor message at all. Waits
  inside a task use ``ObjectRef.future()``, not ``ray.get``, so a task
  keeps its CPU slot and no more bodies start than there are slots.
* **Joined, then killed.** A started body is waited for. ``kill_after``
  seconds after the abort, a body still running is stopped with
  ``ray.cancel(force=True)``: the worker's descendants (recorded first,
  whatever session they moved to) are killed too, and ``wait`` reports the
  dispatch settled only once Ray reports the task ended and, for a worker
  on the driver's node, the worker and its descendants are gone.
  ``BodyReport.killed`` is then ``True``. A task still
  loading its body is stopped the same way, but when its worker reported
  the abort came before its claim (``WITHDRAWN``) the body never started:
  ``NotInvoked``, not killed. No report within 1 s counts
  as a running body.
* **Never retried.** Tasks run with ``max_retries=0``; passing
  ``max_retries`` (other than 0) or ``retry_exceptions`` raises
  ``ValueError``. A worker or node lost under a body gives ``WorkerLost``
  (code ``WORKER_LOST``).

What travels: the body (serialized once per body with Ray's serializer,
``ray.cloudpickle``; ``validate`` refuses one that does not round-trip), the
frozen arguments, the call's ids, name and agent, and the seconds the
call's signal has left (``time_left()``). The remote ``run.signal`` reports
that budget as ``deadline``/``time_left()``, re-based on the worker's clock
when the task starts (``None`` when no timer can abort the call). The
remote ``run`` has a fresh ``token``, ``parent=None`` and ``definition=None``;
``run.defer_context`` works (the contexts come back with the result, lost
if the body is killed); ``run.dispatch`` raises ``RuntimeError``.
``contextvars`` do not cross. A return value that does not pickle becomes
``INVALID_TOOL_OUTPUT``; an exception that does not pickle, or that the
caller cannot deserialize (its class comes from a module installed only on
the workers), arrives as an exception of the same class name and message
(a ``ToolError`` with the same code, or an ``AbortError`` with the same
timeout reason, when it was one).

Threads: ``submit``/``wait``/``report`` run in the thread blocked in
``execute``, which waits in ``ray.get`` on the task; the abort listener runs
in the thread that aborted the signal and only sends one actor message and
Ray's cancel. The descendant sweep needs Linux (``/proc``) and runs only for
a worker on the driver's node; elsewhere the forced stop is Ray's alone. The Ray this backend uses is process-wide:
``close()`` releases the backend's actor, never ``ray.shutdown()``.
"""

from __future__ import annotations

from ._backends.ray.backend import RayBackend

__all__ = ["RayBackend"]

# Public names say where users import them from (reprs, tracebacks,
# pickles): ``dshtools.ray.RayBackend``, not the private module.
RayBackend.__module__ = __name__
