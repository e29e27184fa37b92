"""``@dshtools.tool`` and ``dshtools.tools_from_module`` (docs/contract.md#typed-tools).

Light on purpose: ``import dshtools`` imports this module, so it imports
nothing beyond the standard library; the typed-tool machinery
(``_types.functions``, pydantic, docstring-parser) is imported when
``tools_from_module`` makes the first definition.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, ParamSpec, TypedDict, TypeVar, overload

if TYPE_CHECKING:
    from types import ModuleType

    from typing_extensions import Unpack

    from .tools import BackendLike, ToolDefinition

__all__ = ["TOOL_MARK", "ToolOptions", "tool", "tools_from_module"]


class ToolOptions(TypedDict, total=False):
    """The options of ``ToolDefinition.from_function`` that the decorators
    take (``@registry.tool(...)``, ``@dshtools.tool(...)``); each is
    documented there. ``timeout`` is in seconds."""

    name: str | None
    description: str | None
    timeout: float | None
    concurrency_safe: bool
    backend: BackendLike | None
    strict: bool
    output_schema: bool


_P = ParamSpec("_P")
_R = TypeVar("_R")

TOOL_MARK: Final = "__dshtools_tool__"
"""The attribute ``dshtools.tool`` sets on a function: the options it was
given, read by ``tools_from_module``."""


@overload
def tool(fn: Callable[_P, _R], /) -> Callable[_P, _R]: ...


@overload
def tool(**options: Unpack[ToolOptions]) -> Callable[[Callable[_P, _R]], Callable[_P, _R]]: ...


def tool(fn: Callable[..., object] | None = None, /, **options: Unpack[ToolOptions]) -> Any:
    """``@dshtools.tool`` / ``@dshtools.tool(name=..., timeout=...,
    concurrency_safe=..., backend=..., strict=..., output_schema=...)``:
    marks ``fn`` as a tool of its module (for ``tools_from_module`` and the
    command line's ``--tools MODULE``) and returns it unchanged. Nothing is
    checked or imported here: the tool is made, and refused with a
    ``TypeError``, when its module's tools are collected."""

    def mark(f: Callable[..., object]) -> Callable[..., object]:
        try:
            setattr(f, TOOL_MARK, dict(options))
        except (AttributeError, TypeError):
            raise TypeError(f"@dshtools.tool marks functions, not {type(f).__name__}") from None
        return f

    return mark if fn is None else mark(fn)


def tools_from_module(module: ModuleType | str) -> list[ToolDefinition]:
    """A ``ToolDefinition`` for every function of ``module`` (a module or
    its dotted name, imported) marked ``@dshtools.tool``, in the order the
    module defines them. Functions imported into the module from another
    are not its tools. Raises ``TypeError`` as ``from_function`` does, and
    ``ImportError`` for a name that does not import."""
    import importlib

    from .tools import ToolDefinition as Definition

    if isinstance(module, str):
        module = importlib.import_module(module)
    found: list[ToolDefinition] = []
    for value in list(vars(module).values()):
        options = getattr(value, TOOL_MARK, None) if callable(value) else None
        if not isinstance(options, dict) or getattr(value, "__module__", None) != module.__name__:
            continue
        found.append(Definition.from_function(value, **options))
    return found
