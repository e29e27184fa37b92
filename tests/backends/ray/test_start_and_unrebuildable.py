"""``RayBackend`` started ahead (docs/contract.md#a32) and a value the
caller cannot rebuild (docs/contract.md#a28, field case N18 on Ray): the
result names the class, and the backend goes on serving calls; a
script's model among the arguments travels by value. Skipped
only when ``ray`` is not importable."""

from __future__ import annotations

import os
import sys
from typing import Any

import pydantic
import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'dshtools[ray]')")

from dshtools import INVALID_TOOL_OUTPUT, ToolRegistry, ToolRunContext, ToolSuccess  # noqa: E402
from dshtools.ray import RayBackend  # noqa: E402
from tests.helpers.calls import call, error_of, tool  # noqa: E402
from tests.helpers.processes import run_python  # noqa: E402
from tests.helpers.workers import returns_worker_only_instance  # noqa: E402

pytestmark = pytest.mark.usefixtures("ray_cluster")


def pid_of_worker(args: Any, run: ToolRunContext) -> int:
    return os.getpid()


@pytest.mark.timeout(120)
def test_a_started_ray_backend_has_its_actor_before_the_first_call_and_names_a_class_only_its_worker_has() -> None:
    def signal_actors() -> set[str]:
        named = ray.util.list_named_actors(all_namespaces=True)
        return {a["name"] for a in named if a["name"].startswith("dshtools-signal-")}

    before = signal_actors()
    backend = RayBackend(prestart=True)
    with ToolRegistry(backend=backend) as registry:
        started = signal_actors() - before
        assert len(started) == 1  # created by start(), before any call
        backend.start()  # idempotent
        assert signal_actors() - before == started
        registry.register(tool("worker_only", returns_worker_only_instance))
        registry.register(tool("pid", pid_of_worker))
        result = registry.execute(call("worker_only", {"module": "dshtools_ray_worker_only_result"}))
        assert result.code == INVALID_TOOL_OUTPUT, result
        message = error_of(result).message
        assert "dshtools_ray_worker_only_result.Receipt" in message, message
        assert "No module named 'dshtools_ray_worker_only_result'" in message, message
        assert isinstance(registry.execute(call("pid", call_id="c2")), ToolSuccess)


class Order(pydantic.BaseModel):
    sku: str
    qty: int


@pytest.mark.timeout(60)
def test_a_call_frame_naming_main_carries_the_class_by_value(monkeypatch: pytest.MonkeyPatch) -> None:
    """A script's model (a class of ``__main__``) among a Ray call's
    arguments pickles by reference to ``__main__``, which a Ray worker's
    ``__main__`` is not; the call frame carries it by value instead, so a
    fresh interpreter rebuilds it."""
    from dshtools._backends.ray.remote import _pack

    monkeypatch.setattr(Order, "__module__", "__main__")
    monkeypatch.setattr(sys.modules["__main__"], "Order", Order, raising=False)
    data = _pack(("key", {"order": Order(sku="tea", qty=3)}))
    proc = run_python(f"import pickle; print(pickle.loads(bytes.fromhex('{data.hex()}'))[1]['order'].qty)")
    assert proc.stdout.strip() == "3"
