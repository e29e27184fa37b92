"""A mypy plugin that rejects ``del view.signal`` on the around-dispatch view.

The type checker enforces the views' read-only signals
(docs/contract.md#calls), which includes rejecting ``del`` of
``ToolDispatchExecution.signal``.
mypy itself does not check ``del`` of a property that has no deleter
(python/mypy#12904), so this plugin adds exactly that check and nothing
else. Enable it in the mypy configuration::

    [mypy]
    plugins = dshtools.mypy_plugin

Without the plugin every other typing rule of the views still holds (assigning a
read-only ``signal``, assigning ``None`` to the dispatch view's ``signal``,
constructing ``ToolExecutionInput`` without ``signal``); only the ``del``
check needs it. The error is reported under the ``misc`` code.

How: mypy type-checks ``del x.attr`` by evaluating ``x.attr`` as an rvalue,
which runs the attribute hook; the hook finds out whether that member
expression is the target of a ``del`` statement of the module being checked
(collected once per module) and reports it.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy.errorcodes import MISC
from mypy.nodes import (
    Block,
    ClassDef,
    Decorator,
    DelStmt,
    Expression,
    ForStmt,
    FuncDef,
    IfStmt,
    ListExpr,
    MatchStmt,
    MemberExpr,
    MypyFile,
    OverloadedFuncDef,
    TryStmt,
    TupleExpr,
    WhileStmt,
    WithStmt,
)
from mypy.plugin import AttributeContext, Plugin
from mypy.types import Type

__all__ = ["DshtoolsPlugin", "plugin"]

_UNDELETABLE = frozenset(
    {
        "dshtools._types.tools.ToolDispatchExecution.signal",
    }
)


def _collect(expr: Expression, out: set[int]) -> None:
    if isinstance(expr, MemberExpr):
        out.add(id(expr))
    elif isinstance(expr, (TupleExpr, ListExpr)):
        for item in expr.items:
            _collect(item, out)


def _del_targets_of(tree: MypyFile) -> set[int]:
    """ids of the member expressions that are ``del`` targets in ``tree``.
    (mypy's TraverserVisitor is a compiled trait that interpreted plugins
    cannot subclass, hence this small explicit walk over statements.)"""
    out: set[int] = set()
    todo: list[object] = list(tree.defs)
    while todo:
        node = todo.pop()
        if isinstance(node, DelStmt):
            _collect(node.expr, out)
        elif isinstance(node, Block):
            todo.extend(node.body)
        elif isinstance(node, (FuncDef, ClassDef)):
            todo.append(node.body if isinstance(node, FuncDef) else node.defs)
        elif isinstance(node, Decorator):
            todo.append(node.func)
        elif isinstance(node, OverloadedFuncDef):
            # the @overload stubs are the items; the body that runs is impl
            todo.extend(node.items)
            todo.append(node.impl)
        elif isinstance(node, IfStmt):
            todo.extend(node.body)
            todo.append(node.else_body)
        elif isinstance(node, (WhileStmt, ForStmt)):
            todo.extend((node.body, node.else_body))
        elif isinstance(node, WithStmt):
            todo.append(node.body)
        elif isinstance(node, TryStmt):
            todo.extend((node.body, node.else_body, node.finally_body))
            todo.extend(node.handlers)
        elif isinstance(node, MatchStmt):
            todo.extend(node.bodies)
    return out


class DshtoolsPlugin(Plugin):
    """Adds the ``del ToolDispatchExecution.signal`` check."""

    def __init__(self, options: object) -> None:
        super().__init__(options)  # type: ignore[arg-type]
        self._trees: dict[int, tuple[MypyFile, set[int]]] = {}

    def get_attribute_hook(self, fullname: str) -> Callable[[AttributeContext], Type] | None:
        if fullname in _UNDELETABLE:
            return self._check
        return None

    def _del_targets(self, tree: MypyFile) -> set[int]:
        cached = self._trees.get(id(tree))
        if cached is None or cached[0] is not tree:
            cached = (tree, _del_targets_of(tree))
            self._trees[id(tree)] = cached
        return cached[1]

    def _check(self, ctx: AttributeContext) -> Type:
        tree = getattr(ctx.api, "tree", None)
        if (
            isinstance(ctx.context, MemberExpr)
            and isinstance(tree, MypyFile)
            and id(ctx.context) in self._del_targets(tree)
        ):
            ctx.api.fail(
                f'"{ctx.context.name}" of the around-dispatch view cannot be deleted; assign another AbortSignal',
                ctx.context,
                code=MISC,
            )
        return ctx.default_attr_type


def plugin(version: str) -> type[Plugin]:
    """mypy's entry point."""
    return DshtoolsPlugin
