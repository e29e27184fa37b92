"""Property test: random graphs of controllers, timeouts, already-aborted
signals and ``any_of`` (including ``any_of`` over derived signals), with
random aborts, timer firings, closes, listener registrations and removals,
agree with a small reference model (docs/contract.md#cancellation) on every node's
``aborted``/``reason``/``listener_count`` and on the exact order listeners run.

Timeouts use a 3600 s duration and are fired deterministically by calling
the timer callback (``_on_timer``) the way the timer thread does — no sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dshtools import AbortController, AbortError, AbortSignal, ListenerHandle, TimeoutReason
from dshtools._signal.signal import _LinkedSignal

REASONS = [None, 0, "", False, "user", ("tuple", 1)]


def _linked(signal: AbortSignal) -> _LinkedSignal:
    """A timeout or deadline signal, as the timer sees it (to fire it by hand)."""
    assert isinstance(signal, _LinkedSignal)
    return signal


@dataclass
class Node:
    kind: str  # "ctrl" | "timeout" | "already" | "derived"
    signal: AbortSignal
    controller: AbortController | None = None
    aborted: bool = False
    reason: object = None
    closed: bool = False
    roots: list[int] = field(default_factory=list)  # derived: linked roots
    listeners: list[int] = field(default_factory=list)  # pending listener ids


@dataclass
class Listener:
    node: int
    handle: ListenerHandle


class Model:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.listeners: list[Listener] = []
        self.log: list[tuple[int, tuple[bool, ...]]] = []

    # ------------------------------------------------------------ helpers

    def snapshot(self) -> tuple[bool, ...]:
        return tuple(n.signal.aborted for n in self.nodes)

    def make_callback(self, lid: int) -> Callable[[AbortSignal], None]:
        def callback(s: AbortSignal) -> None:
            self.log.append((lid, self.snapshot()))

        return callback

    def check_root_reason(self, node: Node, given: object, timer: bool) -> object:
        actual = node.signal.reason
        if timer:
            assert isinstance(actual, TimeoutReason)
            assert (actual.code, actual.seconds) == ("TIMEOUT", 3600.0)
        elif given is None:
            assert isinstance(actual, AbortError) and actual.reason is None
        else:
            assert actual is given
        return actual

    def abort_root(self, idx: int, given: object, timer: bool) -> list[int]:
        """Model an abort of root `idx`; returns the expected listener order."""
        node = self.nodes[idx]
        if node.aborted or (timer and node.closed):
            return []
        node.aborted = True
        node.reason = self.check_root_reason(node, given, timer)
        expected = list(node.listeners)
        node.listeners = []
        for d in self.nodes:  # creation order == derivation order
            if d.kind == "derived" and not d.aborted and not d.closed and idx in d.roots:
                d.aborted = True
                d.reason = node.reason
                d.roots = []
                expected.extend(d.listeners)
                d.listeners = []
        # The aborted root drops its links to dependents.
        return expected

    def expected_listener_count(self, idx: int) -> int:
        node = self.nodes[idx]
        n = len(node.listeners)
        if node.kind in ("ctrl", "timeout") and not node.aborted:
            n += sum(1 for d in self.nodes if d.kind == "derived" and not d.aborted and not d.closed and idx in d.roots)
        return n

    def check(self) -> None:
        for i, node in enumerate(self.nodes):
            assert node.signal.aborted is node.aborted, (i, node.kind)
            if node.aborted:
                assert node.signal.reason is node.reason, (i, node.kind)
            else:
                assert node.signal.reason is None
            assert node.signal.listener_count == self.expected_listener_count(i), (i, node.kind)


op_names = st.sampled_from(
    [
        "ctrl",
        "ctrl",
        "timeout",
        "already",
        "any_of",
        "any_of",
        "any_of",
        "abort",
        "abort",
        "fire",
        "close",
        "listen",
        "listen",
        "remove",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_signal_graphs_agree_with_the_reference_model(data: st.DataObject) -> None:
    m = Model()
    try:
        for _ in range(data.draw(st.integers(1, 40), label="steps")):
            op = data.draw(op_names, label="op")
            nodes = m.nodes
            m.log.clear()
            expected_log: list[int] = []
            if op == "ctrl":
                controller = AbortController()
                nodes.append(Node("ctrl", controller.signal, controller=controller))
            elif op == "timeout":
                nodes.append(Node("timeout", AbortSignal.timeout(3600)))
            elif op == "already":
                given_reason = data.draw(st.sampled_from(REASONS), label="reason")
                s = AbortSignal.already_aborted(given_reason)
                node = Node("already", s, aborted=True)
                node.reason = m.check_root_reason(node, given_reason, timer=False)
                nodes.append(node)
            elif op == "any_of":
                if nodes:
                    children = data.draw(st.lists(st.integers(0, len(nodes) - 1), max_size=4), label="children")
                else:
                    children = []
                s = AbortSignal.any_of([nodes[ci].signal for ci in children])
                node = Node("derived", s)
                for ci in children:  # first already-aborted input wins
                    if nodes[ci].aborted:
                        node.aborted = True
                        node.reason = nodes[ci].reason
                        break
                else:
                    for ci in children:
                        child = nodes[ci]
                        new = [ci] if child.kind in ("ctrl", "timeout") else child.roots
                        for r in new:
                            if r not in node.roots:
                                node.roots.append(r)
                nodes.append(node)
            elif op == "abort":
                ctrls = [i for i, n in enumerate(nodes) if n.kind == "ctrl"]
                if ctrls:
                    idx = data.draw(st.sampled_from(ctrls), label="abort")
                    given_reason = data.draw(st.sampled_from(REASONS), label="reason")
                    ctrl = nodes[idx].controller
                    assert ctrl is not None
                    ctrl.abort(given_reason)
                    expected_log = m.abort_root(idx, given_reason, timer=False)
            elif op == "fire":
                timers = [i for i, n in enumerate(nodes) if n.kind == "timeout"]
                if timers:
                    idx = data.draw(st.sampled_from(timers), label="fire")
                    _linked(nodes[idx].signal)._on_timer()  # what an abort runner does
                    expected_log = m.abort_root(idx, None, timer=True)
            elif op == "close":
                if nodes:
                    idx = data.draw(st.integers(0, len(nodes) - 1), label="close")
                    node = nodes[idx]
                    node.signal.close()
                    if node.kind in ("timeout", "derived"):
                        node.closed = True
                        if node.kind == "derived" and not node.aborted:
                            node.roots = []
            elif op == "listen":
                if nodes:
                    idx = data.draw(st.integers(0, len(nodes) - 1), label="listen")
                    run_if_aborted = data.draw(st.booleans(), label="run_if_aborted")
                    lid = len(m.listeners)
                    handle = nodes[idx].signal.add_listener(
                        m.make_callback(lid),
                        run_if_aborted=run_if_aborted,
                    )
                    m.listeners.append(Listener(idx, handle))
                    if nodes[idx].aborted:
                        assert handle.registered is False
                        if run_if_aborted:
                            expected_log = [lid]
                    else:
                        assert handle.registered is True
                        nodes[idx].listeners.append(lid)
            elif op == "remove" and m.listeners:
                lid = data.draw(st.integers(0, len(m.listeners) - 1), label="remove")
                listener = m.listeners[lid]
                listener.handle.remove()
                pending = nodes[listener.node].listeners
                if lid in pending:
                    pending.remove(lid)
            # Exact listener order, and every listener saw the final state of
            # this step (all marking happens before any listener runs).
            assert [lid for lid, _ in m.log] == expected_log
            final = m.snapshot()
            assert all(snap == final for _, snap in m.log)
            m.check()
    finally:
        for node in m.nodes:
            if node.kind == "timeout":
                node.signal.close()
