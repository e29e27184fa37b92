"""Deep, lossless, iterative freezing of JSON values (docs/contract.md#calls,
docs/contract.md#step-validate).

Guarantees:

* ``freeze(value)`` accepts exactly the JSON data model: ``dict`` with
  ``str`` keys, ``list``/``tuple``, ``str``, ``int``, finite ``float``,
  ``bool`` and ``None``. Anything else (``set``, ``bytes``, non-``str``
  keys, ``nan``/``inf``, subclasses of the scalar types such as enums,
  arbitrary objects, a cycle) raises ``FreezeError`` whose ``path`` is the
  JSON path of the offending value (``$.a[0]``). Nothing is coerced.
* The result is immutable all the way down: mappings become
  ``FrozenDict`` (a read-only ``dict`` subclass, so JSON Schema validators
  that need a real mapping accept it), sequences become ``tuple``.
* Iterative, never recursive: depth 100 000 works. The same container
  reached twice (a DAG, not a cycle) is valid. The bounded fast path for
  small values (at most 512 containers) copies shared parts; the
  iterative walk memoises them, so a crafted DAG cannot blow up
  exponentially.
* A ``FrozenDict`` is produced only by ``freeze``; one met inside a value
  is trusted as already frozen and reused without a walk.
* ``thaw(value)`` is the inverse: plain ``dict``/``list``, also iterative.

Why a ``dict`` subclass and not ``types.MappingProxyType``: ``jsonschema-rs``
refuses mapping proxies, and validating a thawed copy would double the
work on every call. Bypassing the read-only methods with
``dict.__setitem__`` is possible, as it is for any Python object; the
contract is that the public mutators raise ``TypeError``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from typing import Any, Final, NoReturn

__all__ = ["FreezeError", "FrozenDict", "canonical", "dumps", "freeze", "freeze_with_height", "json_path", "thaw"]


class FrozenDict(dict[str, Any]):
    """A read-only ``dict``: every mutator raises ``TypeError``."""

    __slots__ = ("_height",)
    _height: int

    def _readonly(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("this mapping is read-only (a frozen snapshot); use dshtools.thaw() for a mutable copy")

    __setitem__ = _readonly
    __delitem__ = _readonly
    __ior__ = _readonly
    clear = _readonly
    pop = _readonly
    popitem = _readonly
    setdefault = _readonly
    update = _readonly

    @property
    def height(self) -> int:
        """Nesting depth of this value (a flat object is 1)."""
        try:
            return self._height
        except AttributeError:
            h = freeze_with_height(dict(self))[1]
            object.__setattr__(self, "_height", h)
            return h

    def __copy__(self) -> FrozenDict:
        return self

    def __deepcopy__(self, memo: dict[int, object]) -> FrozenDict:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (dict(self),))

    def __repr__(self) -> str:
        return f"FrozenDict({dict.__repr__(self)})"


def _rebuild(d: dict[str, Any]) -> FrozenDict:
    frozen: FrozenDict = freeze_with_height(d)[0]
    return frozen


def _make(d: dict[str, Any], height: int) -> FrozenDict:
    fd = FrozenDict(d)
    object.__setattr__(fd, "_height", height)
    return fd


# Shared: a FrozenDict cannot be changed, so one empty object serves all.
_EMPTY_OBJECT: Final = _make({}, 1)


class FreezeError(ValueError):
    """A value outside the JSON data model. ``path`` is its JSON path,
    ``problem`` says what is wrong with it."""

    def __init__(self, problem: str, path: str) -> None:
        super().__init__(f"{problem} at {path}")
        self.problem = problem
        self.path = path


def _key_part(key: object) -> str:
    if isinstance(key, str):
        if key.isidentifier():
            return "." + key
        return "[" + json.dumps(key) + "]"
    return f"[{key!r}]"


def json_path(parts: list[object]) -> str:
    """``['a', 0, 'b c']`` -> ``$.a[0]["b c"]``."""
    out = ["$"]
    for p in parts:
        if isinstance(p, int) and not isinstance(p, bool):
            out.append(f"[{p}]")
        else:
            out.append(_key_part(p))
    return "".join(out)


class _Frame:
    __slots__ = ("height", "is_map", "items", "key", "out", "pending_key", "src")

    def __init__(self, src: Any, is_map: bool, key: object) -> None:
        self.src = src
        self.is_map = is_map
        self.key = key  # this container's key/index in its parent (for paths)
        self.out: Any = {} if is_map else []
        # list(...) is the snapshot: later mutation by another thread cannot
        # change what we walk.
        self.items: Iterator[Any] = iter(list(src.items()) if is_map else list(src))
        self.pending_key: object = None
        self.height = 0  # max height of the children frozen so far


def freeze(value: object) -> Any:
    """Deep-freeze a JSON value (see the module docstring). Raises
    ``FreezeError`` (a ``ValueError``) for anything outside the JSON model."""
    return freeze_with_height(value)[0]


def freeze_with_height(value: object) -> tuple[Any, int]:
    """``freeze`` plus the nesting depth of the result (scalar: 0, flat
    object/array: 1), without a second walk."""
    t = type(value)
    if t is dict:  # the usual arguments: tested first
        if not value:
            return _EMPTY_OBJECT, 1  # a tool without parameters
    elif t is str or t is int or t is bool or value is None:
        return value, 0
    elif t is FrozenDict:
        return value, value.height  # type: ignore[attr-defined]
    elif t is float:
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise FreezeError(f"non-finite number {value!r} is not JSON", "$")
        return value, 0
    elif not isinstance(value, (dict, list, tuple)):
        raise FreezeError(_own_problem(value) or f"unsupported type {t.__name__!r} (not a JSON value)", "$")
    # Fast path for the common small, shallow, well-formed value; anything
    # unusual (depth, size, a bad value, a shared container) falls back to
    # the iterative walk, which also produces the precise error.
    budget = [_FAST_NODES]
    try:
        return _fast(value, 0, budget)
    except _Fallback:
        return _freeze_container(value)


def _own_problem(value: object) -> str | None:
    """The ``__json_problem__`` text of a placeholder that knows why it is
    not JSON (``dshtools.openai.MalformedArguments``: the model's arguments
    string did not parse), so INVALID_ARGS can tell the model what it got
    wrong. Never raises."""
    try:
        problem = getattr(value, "__json_problem__", None)
    except Exception:
        return None
    return problem if isinstance(problem, str) else None


_FAST_DEPTH = 32
_FAST_NODES = 512


class _Fallback(Exception):
    pass


def _fast(value: Any, depth: int, budget: list[int]) -> tuple[Any, int]:
    if depth > _FAST_DEPTH:
        raise _Fallback
    budget[0] -= 1
    if budget[0] < 0:
        raise _Fallback
    h = 0
    vt = type(value)
    if vt is dict:
        out = {}
        for k, c in value.items():
            if type(k) is not str:
                raise _Fallback
            ct = type(c)
            if ct is str or ct is int or ct is bool or c is None or (ct is float and math.isfinite(c)):
                out[k] = c
            elif ct is dict or ct is list or ct is tuple:
                out[k], ch = _fast(c, depth + 1, budget)
                h = max(h, ch)
            elif ct is FrozenDict:
                out[k] = c
                ch = c.height
                h = max(h, ch)
            else:
                raise _Fallback
        return _make(out, h + 1), h + 1
    if vt is list or vt is tuple:
        items = []
        for c in value:
            ct = type(c)
            if ct is str or ct is int or ct is bool or c is None or (ct is float and math.isfinite(c)):
                items.append(c)
            elif ct is dict or ct is list or ct is tuple:
                fc, ch = _fast(c, depth + 1, budget)
                items.append(fc)
                h = max(h, ch)
            elif ct is FrozenDict:
                items.append(c)
                ch = c.height
                h = max(h, ch)
            else:
                raise _Fallback
        return tuple(items), h + 1
    raise _Fallback


def _path_of(stack: list[_Frame], last: object) -> str:
    parts: list[object] = [f.key for f in stack[1:]]
    parts.append(last)
    return json_path(parts)


def _freeze_container(root: Any) -> tuple[Any, int]:
    # memo: id(source container) -> (source, frozen, height). Holding the
    # source keeps its id from being reused while we walk.
    memo: dict[int, tuple[object, object, int]] = {}
    active: set[int] = set()
    stack = [_Frame(root, isinstance(root, dict), None)]
    active.add(id(root))
    result: Any = None
    result_h = 0
    while stack:
        frame = stack[-1]
        item: Any
        for item in frame.items:
            if frame.is_map:
                key, child = item
                if type(key) is not str:
                    raise FreezeError(
                        f"non-string key {key!r} (JSON object keys are strings)",
                        json_path([f.key for f in stack[1:]]),
                    )
                where: object = key
            else:
                child = item
                where = len(frame.out)
            ct = type(child)
            ch = 0
            if ct is str or ct is int or ct is bool or child is None:
                frozen: Any = child
            elif ct is FrozenDict:
                frozen = child
                ch = child.height
            elif ct is float:
                if not math.isfinite(child):
                    raise FreezeError(f"non-finite number {child!r} is not JSON", _path_of(stack, where))
                frozen = child
            elif isinstance(child, (dict, list, tuple)):
                cid = id(child)
                hit = memo.get(cid)
                if hit is not None:
                    frozen = hit[1]
                    ch = hit[2]
                elif cid in active:
                    raise FreezeError("cycle (a container contains itself)", _path_of(stack, where))
                else:
                    frame.pending_key = where
                    active.add(cid)
                    stack.append(_Frame(child, isinstance(child, dict), where))
                    break
            else:
                # every JSON scalar was matched above by its exact type
                raise FreezeError(f"unsupported type {ct.__name__!r} (not a JSON value)", _path_of(stack, where))
            frame.height = max(frame.height, ch)
            if frame.is_map:
                frame.out[where] = frozen
            else:
                frame.out.append(frozen)
        else:
            # Exhausted: build the frozen container and hand it to the parent.
            stack.pop()
            h = frame.height + 1
            built: Any = _make(frame.out, h) if frame.is_map else tuple(frame.out)
            active.discard(id(frame.src))
            memo[id(frame.src)] = (frame.src, built, h)
            if stack:
                parent = stack[-1]
                parent.height = max(parent.height, h)
                if parent.is_map:
                    parent.out[parent.pending_key] = built
                else:
                    parent.out.append(built)
            else:
                result = built
                result_h = h
    return result, result_h


def thaw(value: object) -> Any:
    """The mutable twin of a frozen value: read-only mappings (any
    ``Mapping``) become ``dict``, tuples and lists become ``list``, scalars
    are returned as they are. Iterative (deep values work); a container
    reached twice is thawed once and shared. Source: docs/contract.md#calls."""
    from collections.abc import Mapping

    def is_map(v: object) -> bool:
        return isinstance(v, Mapping)

    def is_seq(v: object) -> bool:
        return isinstance(v, (tuple, list))

    if not (is_map(value) or is_seq(value)):
        return value
    memo: dict[int, tuple[object, object]] = {}

    def new(v: Any) -> tuple[Any, Iterator[Any]]:
        if is_map(v):
            return {}, iter(list(v.items()))
        return [], iter(list(v))

    root_out, root_it = new(value)
    memo[id(value)] = (value, root_out)
    stack: list[tuple[Any, Iterator[Any], bool]] = [(root_out, root_it, is_map(value))]
    while stack:
        out, it, m = stack[-1]
        for item in it:
            if m:
                k, child = item
            else:
                child = item
            if is_map(child) or is_seq(child):
                hit = memo.get(id(child))
                if hit is not None:
                    conv = hit[1]
                    push = None
                else:
                    conv, cit = new(child)
                    memo[id(child)] = (child, conv)
                    push = (conv, cit, is_map(child))
            else:
                conv = child
                push = None
            if m:
                out[k] = conv
            else:
                out.append(conv)
            if push is not None:
                stack.append(push)
                break
        else:
            stack.pop()
    return root_out


_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)
_SCALAR_TEXT: dict[object, str] = {None: "null", True: "true", False: "false"}
_write_string: Any = json.encoder.encode_basestring


def dumps(value: object) -> str:
    """JSON text of a frozen JSON value, as ``json.dumps(value,
    ensure_ascii=False)`` writes it (``", "`` and ``": "`` separators); a
    value too deep for the C encoder's recursion limit is written by an
    iterative encoder to the same text."""
    if value is None or value is True or value is False:
        return _SCALAR_TEXT[value]
    try:
        return _ENCODER.encode(value)
    except RecursionError:
        pass
    return _write(value, ", ", ": ", sort_keys=False, scalar=lambda v: json.dumps(v, ensure_ascii=False))


def canonical(value: object, *, max_chars: int | None = None) -> str:
    """The canonical JSON text of a plain JSON value (``dict`` with ``str``
    keys, ``list``/``tuple``, ``str``, ``int``, finite ``float``, ``bool``,
    ``None``), in the style of RFC 8785: no whitespace, keys sorted (by code
    point), strings as ``json.dumps(..., ensure_ascii=False)`` writes them,
    and numbers by value: an integral ``float`` is written as the integer
    (``2.0`` as ``2``, ``-0.0`` as ``0``), any other ``float`` as its
    shortest round-trip text. Two values equal after any conforming JSON
    round trip (number forms, key order, whitespace, escapes) give the same
    text. Iterative: any depth. Raises ``ValueError`` for anything outside
    the JSON data model, a cycle, an ``int`` too long to write, or text
    longer than ``max_chars`` characters (a value that shares containers
    is written out in full). Source: docs/contract.md#a27."""
    return _write(value, ",", ":", sort_keys=True, scalar=_canonical_scalar, max_chars=max_chars)


def _canonical_scalar(v: object) -> str:
    if v is None or v is True or v is False:
        return _SCALAR_TEXT[v]
    if isinstance(v, str):
        return str(_write_string(v))
    if isinstance(v, int):
        return int.__repr__(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"{v!r} is not a JSON number")
        return int.__repr__(int(v)) if v.is_integer() else float.__repr__(v)
    raise ValueError(f"a {type(v).__name__} is not a JSON value")


def _write(
    value: object,
    item_sep: str,
    key_sep: str,
    *,
    sort_keys: bool,
    scalar: Callable[[object], str],
    max_chars: int | None = None,
) -> str:
    """JSON text of ``value`` without recursion: containers are ``dict``,
    ``list`` and ``tuple``, everything else goes to ``scalar``. A container
    met again inside itself raises ``ValueError``; so does text longer than
    ``max_chars``."""
    out: list[str] = []
    size = 0
    open_ids: set[int] = set()
    # Stack of pending steps: (0, value) writes a value, (1, text) a literal,
    # (2, container id) closes a container (it may appear again, not inside).
    todo: list[tuple[int, Any]] = [(0, value)]
    while todo:
        step, v = todo.pop()
        if step == 2:
            open_ids.discard(v)
            continue
        if step == 1:
            text = v
        elif isinstance(v, (dict, list, tuple)):
            if id(v) in open_ids:
                raise ValueError("a JSON value cannot contain itself")
            open_ids.add(id(v))
            todo.append((2, id(v)))
            if isinstance(v, dict):
                items = list(v.items())
                if any(type(k) is not str for k, _ in items):
                    raise ValueError("a JSON object's keys are strings")
                if sort_keys:
                    items.sort(key=lambda kv: kv[0])
                todo.append((1, "}"))
                for i in range(len(items) - 1, -1, -1):
                    k, c = items[i]
                    todo.append((0, c))
                    todo.append((1, (item_sep if i else "") + _write_string(k) + key_sep))
                text = "{"
            else:
                todo.append((1, "]"))
                for i in range(len(v) - 1, -1, -1):
                    todo.append((0, v[i]))
                    if i:
                        todo.append((1, item_sep))
                text = "["
        else:
            text = scalar(v)
        size += len(text)
        if max_chars is not None and size > max_chars:
            raise ValueError(f"the JSON text is longer than {max_chars} characters")
        out.append(text)
    return "".join(out)
