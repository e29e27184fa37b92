"""Objects left on reference cycles.

``cyclic_garbage_of`` and ``reference_cycles`` (objects left on reference
cycles, with ``on_reference_cycles`` and ``ReferenceCycles``), and
``young_heap`` (a collection that traverses only the objects made inside).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def young_heap() -> Iterator[None]:
    """Inside, a ``gc.collect()`` traverses only the objects made inside:
    everything older is moved to the permanent generation (``gc.freeze``)
    and moved back on exit. An older object still keeps what it references
    alive, so nothing reachable is freed; a cycle made inside is found as
    before. For tests that collect again and again: one full collection of
    the test runner's heap (the SDKs, Ray, pydantic loaded) costs a tenth of
    a second or more."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def on_reference_cycles(objects: list[object]) -> list[object]:
    """The members of ``objects`` that lie on a reference cycle running
    through ``objects`` only (a strongly connected component of more than
    one object, or an object that refers to itself). Never recursive."""
    by_id = {id(o): o for o in objects}
    edges = {i: [id(r) for r in gc.get_referents(o) if id(r) in by_id] for i, o in by_id.items()}
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    found: list[object] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, 0)]  # Tarjan's algorithm with an explicit stack
        while work:
            node, next_edge = work.pop()
            if next_edge == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            for j in range(next_edge, len(edges[node])):
                target = edges[node][j]
                if target not in index:
                    work += [(node, j + 1), (target, 0)]
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                if low[node] == index[node]:
                    component: list[int] = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    if len(component) > 1 or node in edges[node]:
                        found += [by_id[i] for i in component]
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
    return found


class ReferenceCycles:
    """What ``reference_cycles`` found: ``count`` objects on reference
    cycles and their sorted type names, ``kinds``."""

    count: int = 0
    kinds: tuple[str, ...] = ()


@contextlib.contextmanager
def reference_cycles() -> Iterator[ReferenceCycles]:
    """Counts the objects left on reference cycles by the code run in the
    ``with`` block, filled in when it ends. Runs with the collector off and
    ``gc.DEBUG_SAVEALL`` (whatever a collection finds unreachable is kept),
    then counts only the objects on a cycle among them: on a free-threaded
    build an object whose last reference another thread dropped reaches the
    collector too (its reference count is merged there), though reference
    counting alone frees it. A count of 0 means no cycle was left."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    result = ReferenceCycles()
    try:
        yield result
        gc.collect()
        cyclic = on_reference_cycles(gc.garbage)
        result.count = len(cyclic)
        result.kinds = tuple(sorted({type(o).__name__ for o in cyclic}))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        if was_enabled:
            gc.enable()


def cyclic_garbage_of(run: Callable[[int], None], repeat: int = 10) -> tuple[int, list[str]]:
    """How many objects ``run(i)`` for ``i`` in ``range(repeat)`` leaves on
    reference cycles, and their sorted type names (``reference_cycles``),
    after one warm-up ``run(-1)`` (pools and caches made once). A count of 0
    means every object was freed by reference counting."""
    run(-1)
    with reference_cycles() as cycles:
        for i in range(repeat):
            run(i)
    return cycles.count, list(cycles.kinds)
