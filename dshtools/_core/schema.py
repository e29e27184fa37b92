"""JSON Schema compilation and validation with ``jsonschema-rs``: each schema
is compiled once, at registration (docs/contract.md#registry).

Guarantees:

* A schema is checked against its meta-schema and compiled **once**
  (``CompiledSchema``); validating a value never compiles anything.
* Validation never crashes the process on deep values. ``jsonschema-rs``
  recurses natively, and a native stack overflow is a segfault, not a
  ``RecursionError``. Values nested at most ``INLINE_DEPTH`` levels are
  validated in the calling thread; deeper values (up to ``MAX_DEPTH``)
  are validated on a short-lived helper thread whose stack is sized for
  the depth. Deeper than ``MAX_DEPTH`` is reported as a problem, never
  attempted. The helper's creation sets ``threading.stack_size`` briefly
  (process-global); it is serialised by a lock and restored at once.
* Validation is bounded (docs/contract.md#a6): time and memory grow
  linearly with the value. The yes/no answer (``is_valid``) is linear in
  ``jsonschema-rs``. Describing a violation costs one copy of the part of
  the value it is about (its message prints it), so at most
  ``_MAX_ERRORS`` descriptions cost at most that many copies of the value:
  linear. Except under ``anyOf``/``oneOf``: such an error carries its
  branches' errors, each holding its own copy, and nested branches
  multiply, so with a recursive schema the cost is depth × size.
* Large invalid values are still located (docs/contract.md#a20): against a
  schema without ``anyOf``/``oneOf`` anywhere, every invalid value within
  ``DESCRIBE_DEPTH`` levels is described, whatever its size (a 100 001-item
  array names ``$.l[100000]`` and why). Against a schema with them, a
  value is described when depth × size stays within ``_DESCRIBE_BUDGET``.
  Any other invalid value gets one message saying that it does not match
  and how deep it is, without asking the validator why.
* Listing is bounded by the number of violations too: the validator builds
  every violation of a keyword before it hands out the first (200 000
  wrong items cost seconds), so up to ``_MAX_ERRORS`` violations are listed
  only for a value within ``_LIST_BUDGET``; a larger one gets its first
  violation, which the validator stops at.
"""

from __future__ import annotations

import threading
from typing import Any, Final

import jsonschema_rs

from .freeze import json_path
from .interrupts import interrupt_slice

__all__ = ["DESCRIBE_DEPTH", "INLINE_DEPTH", "MAX_DEPTH", "CompiledSchema"]

INLINE_DEPTH: Final = 200
MAX_DEPTH: Final = 200_000
DESCRIBE_DEPTH: Final = INLINE_DEPTH
# depth × size, with size counted in nodes (a string counts one node per
# 64 characters): describing the violations of a value under this budget
# stays within tens of milliseconds and tens of megabytes, whatever the
# schema (tests/core/test_bounded_validation.py holds the worst shapes to
# A6's bounds).
_DESCRIBE_BUDGET: Final = 300_000
# depth × size under which every violation (up to _MAX_ERRORS) is listed;
# above it only the first, so the cost never grows with their number.
_LIST_BUDGET: Final = 20_000
_BRANCHING: Final = frozenset({"anyOf", "oneOf"})
_MAX_ERRORS: Final = 5
_MAX_MESSAGE: Final = 300
# Native stack given to the helper thread per level of nesting: more than
# jsonschema-rs uses per level, recursive ($ref/anyOf) schemas included
# (tests/core/test_bounded_validation.py validates 10 000 levels on it).
_STACK_PER_LEVEL: Final = 4096
_STACK_BASE: Final = 16 * 1024 * 1024
_STACK_LOCK: Final = threading.Lock()


class CompiledSchema:
    """A compiled JSON Schema (2020-12 unless ``$schema`` says otherwise).

    ``CompiledSchema(schema, what)`` raises ``ValueError`` naming ``what``
    when ``schema`` is not a valid JSON Schema."""

    __slots__ = ("_branching", "_validator")

    def __init__(self, schema: Any, what: str) -> None:
        try:
            jsonschema_rs.meta.validate(schema)
        except jsonschema_rs.ValidationError as exc:
            raise ValueError(f"{what} is not a valid JSON Schema: {_short(exc.message)}") from None
        except Exception as exc:  # e.g. an unknown $schema draft
            raise ValueError(f"{what} is not a valid JSON Schema: {_short(str(exc))}") from None
        try:
            self._validator = jsonschema_rs.validator_for(schema)
        except Exception as exc:
            raise ValueError(f"{what} could not be compiled: {_short(str(exc))}") from None
        self._branching = _has_branches(schema)

    def problems(self, value: Any, height: int) -> list[str]:
        """Violations of ``value`` (a frozen JSON value nested ``height``
        levels), each ``"<message> at <JSON path>"``; empty when valid.
        Blocks; runs in the calling thread unless the value is deep."""
        if height <= INLINE_DEPTH:
            return self._problems(value, height)
        if height > MAX_DEPTH:
            return [f"value nests {height} levels deep, more than the {MAX_DEPTH} that can be validated"]
        return self._problems_on_big_stack(value, height)

    def _problems(self, value: Any, height: int) -> list[str]:
        out: list[str] = []
        try:
            if self._validator.is_valid(value):
                return out
            if not _describable(value, height, self._branching):
                return [
                    f"value does not match the schema (too large or too deeply nested, {height} levels, to locate why)"
                ]
            if _fits(value, height, _LIST_BUDGET):
                for err in self._validator.iter_errors(value):
                    out.append(_described(err))
                    if len(out) >= _MAX_ERRORS:
                        break
            else:
                try:
                    self._validator.validate(value)
                except jsonschema_rs.ValidationError as err:
                    out.append(_described(err))
        except ValueError:
            # jsonschema-rs refuses to describe some deep values ("Recursion
            # limit reached" while formatting a message): fall back to a
            # yes/no answer.
            try:
                ok = self._validator.is_valid(value)
            except ValueError as exc:
                return [f"value could not be validated: {_short(str(exc))}"]
            return [] if ok else ["value does not match the schema (nested too deeply to locate the violation)"]
        return out

    def _problems_on_big_stack(self, value: Any, height: int) -> list[str]:
        box: list[list[str] | BaseException] = []

        def work() -> None:
            try:
                box.append(self._problems(value, height))
            except BaseException as exc:  # pragma: no cover - reported below
                box.append(exc)

        size = _STACK_BASE + height * _STACK_PER_LEVEL
        with _STACK_LOCK:
            old = threading.stack_size(size)
            try:
                thread = threading.Thread(target=work, name="dshtools-deep-validate", daemon=True)
                thread.start()
            finally:
                threading.stack_size(old)
        while thread.is_alive():
            thread.join(interrupt_slice())
        result = box[0] if box else RuntimeError("validation thread died")
        if isinstance(result, BaseException):
            return [f"value could not be validated: {type(result).__name__}: {_short(str(result))}"]
        return result


def _has_branches(schema: Any) -> bool:
    """Whether ``anyOf`` or ``oneOf`` appears anywhere in ``schema`` (as a
    key of any object in it: over-approximate, never recursive)."""
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if not _BRANCHING.isdisjoint(item):
                return True
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _describable(value: Any, height: int, branching: bool) -> bool:
    """Whether asking the validator for messages about ``value`` (a frozen
    JSON value nested ``height`` levels) stays within the bound. Without
    branches in the schema each message copies its part of the value once,
    so any value within ``DESCRIBE_DEPTH`` is; with them, depth × size must
    stay within ``_DESCRIBE_BUDGET``."""
    if height > DESCRIBE_DEPTH:
        return False
    return not branching or _fits(value, height, _DESCRIBE_BUDGET)


def _fits(value: Any, height: int, budget: int) -> bool:
    """Whether ``value``'s depth × size is within ``budget`` (size counted
    in nodes, a string one node per 64 characters): linear, and stops
    counting as soon as the budget is spent."""
    budget //= max(height, 1)
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            budget -= 1 + len(item)
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            budget -= 1
            stack.extend(item)
        elif isinstance(item, str):
            budget -= 1 + len(item) // 64
        else:
            budget -= 1
        if budget < 0:
            return False
    return True


def _described(err: Any) -> str:
    """``"<message> at <JSON path>"`` of a jsonschema-rs ``ValidationError``."""
    return f"{_short(err.message)} at {json_path(list(err.instance_path))}"


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"
