"""The tool names a provider sees (docs/contract.md#a12): every
registered name has an alias matching ``^[a-zA-Z0-9_-]{1,64}$``, the name a
model call carries maps back to the registered one. Package-internal; used
by ``dshtools.openai``, ``dshtools.anthropic`` and the framework adapters.

Guarantees:

* ``alias_names`` is deterministic for a given set of names, whatever their
  order, and one-to-one: no two tools share an alias, and no alias is
  another tool's registered name.
* ``Aliases`` holds both directions for one registry's tools; a name that is
  no alias (an unknown tool) maps back to itself, so the registry answers it
  with ``UNKNOWN_TOOL``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any, Final, Protocol

import attrs

__all__ = ["NAME_RULE", "Aliases", "HasSchemas", "alias_names", "checked_name", "registry_schemas"]

NAME_RULE: Final = re.compile(r"[a-zA-Z0-9_-]{1,64}")
_OUTSIDE = re.compile(r"[^a-zA-Z0-9_-]")
_MAX_NAME: Final = 64
_HASH_LEN: Final = 8


def _digest(name: str, length: int) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()[:length]


def _with_suffix(base: str, name: str, length: int) -> str:
    suffix = "_" + _digest(name, length)
    return base[: _MAX_NAME - len(suffix)] + suffix


@lru_cache(maxsize=16)
def _alias_table(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    valid = {n for n in names if NAME_RULE.fullmatch(n)}
    mapped: dict[str, str] = {}
    for name in names:
        if name not in valid:
            mapped[name] = _OUTSIDE.sub("_", name)
    counts: dict[str, int] = {}
    for base in mapped.values():
        counts[base] = counts.get(base, 0) + 1
    taken = set(valid)
    out: dict[str, str] = {n: n for n in valid}
    # Names whose mapping is valid, unique and free keep it; the others
    # (too long, empty, or colliding) get the hash suffix, in sorted order
    # so the outcome does not depend on registration order.
    needs_suffix: list[str] = []
    for name, base in mapped.items():
        if 1 <= len(base) <= _MAX_NAME and counts[base] == 1 and base not in valid:
            out[name] = base
            taken.add(base)
        else:
            needs_suffix.append(name)
    for name in sorted(needs_suffix):
        length = _HASH_LEN
        alias = _with_suffix(mapped[name], name, length)
        while alias in taken:  # a hash collision: lengthen the suffix
            length += 4
            alias = _with_suffix(mapped[name], name, length)
        out[name] = alias
        taken.add(alias)
    return tuple((n, out[n]) for n in names)


def alias_names(names: Iterable[str]) -> dict[str, str]:
    """``{registered name: name sent to the provider}`` for ``names``.

    The rule (docs/contract.md#a12), deterministic for a given set of
    names, whatever their order:

    1. a name matching ``^[a-zA-Z0-9_-]{1,64}$`` is sent unchanged;
    2. otherwise each character outside ``a-z A-Z 0-9 _ -`` becomes ``_``
       (``math.factorial`` → ``math_factorial``, ``get/whoami`` →
       ``get_whoami``);
    3. when that is empty, longer than 64 characters, or equal to another
       tool's name or mapped name, the alias is its first characters, then
       ``_`` and the first 8 hex digits of the SHA-256 of the registered
       name (UTF-8), 64 characters at most in all (longer digests only in
       the unlikely case that this too collides).
    """
    return dict(_alias_table(tuple(names)))


class HasSchemas(Protocol):
    """What the provider formats read of a registry: ``schemas()``, the
    tools' JSON schemas in registration order (``ToolRegistry`` has it)."""

    def schemas(self) -> list[dict[str, Any]]: ...


def registry_schemas(registry: HasSchemas) -> Sequence[Mapping[str, Any]]:
    """``registry.schemas()``; ``TypeError`` naming the ``ToolRegistry``
    expected when ``registry`` has no ``schemas()`` (a list of tools, a
    dict, ``None``)."""
    schemas = getattr(registry, "schemas", None)
    if not callable(schemas):
        raise TypeError(f"registry must be a ToolRegistry (anything with schemas()), not {type(registry).__name__}")
    return schemas()  # type: ignore[no-any-return]


@attrs.frozen
class Aliases:
    """Both directions of ``alias_names`` for one registry's tools."""

    to_alias: Mapping[str, str]
    to_name: Mapping[str, str]

    @classmethod
    def of(cls, registry: HasSchemas) -> Aliases:
        names = [str(schema["name"]) for schema in registry_schemas(registry)]
        forward = alias_names(names)
        return cls(forward, {alias: name for name, alias in forward.items()})

    def name_of(self, sent: str) -> str:
        """The registered name for a name the model used: an alias maps
        back; anything else (an unknown name) is kept as is."""
        return self.to_name.get(sent, sent)


def checked_name(name: object, problem: str | None, missing: str, aliases: Aliases | None) -> tuple[str, str | None]:
    """``(registered name, problem or None)`` for the name a model call
    carries: a non-string counts as ``""``; an empty name is the problem
    ``missing`` unless the call already has one; an alias maps back when
    ``aliases`` is given (``Aliases.name_of``)."""
    name = name if isinstance(name, str) else ""
    if problem is None and not name:
        problem = missing
    if aliases is not None and name:
        name = aliases.name_of(name)
    return name, problem
