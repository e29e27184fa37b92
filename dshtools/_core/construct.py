"""Building instances of frozen, slotted ``attrs`` classes on the hot path.

A frozen ``attrs`` class enforces immutability with a Python-level
``__setattr__``, so its generated ``__init__`` (and any
``object.__setattr__(obj, name, value)`` bypass) pays a slot-wrapper call
per field. The registry builds several such objects per call from values it
produced itself (``ToolRunContext``, the hook views, a body's ``Value``), so
it builds them through a *twin*: a subclass with the same memory layout
(``__slots__ = ()``) and ordinary attribute assignment. The builder sets the
fields with plain stores, then retypes the object to the frozen class::

    obj = Twin()                 # no __init__, no validation
    obj.field = value            # a plain slot store
    obj.__class__ = FrozenClass  # from now on frozen, type() is FrozenClass

The result is indistinguishable from one made by the class's ``__init__``
(same type, fields, ``repr``, frozenness); tests compare the two field by
field. Only for values the caller already knows to be valid: a twin skips
every converter and validator. Package-internal.

Free-threaded builds. There, assigning ``__class__`` stops every other
thread of the process until it is done (CPython's "stop the world"), so
callers running in parallel would wait on each other at every retype. When
the GIL is off at import, ``RETYPE_IN_PLACE`` is false and a builder makes
the frozen object with ``frozen_copy(obj, FrozenClass)`` instead: a new
instance of the frozen class with the twin's slot values, stored through
the slots' own descriptors; no thread waits on another::

    if RETYPE_IN_PLACE:
        obj.__class__ = FrozenClass
    else:
        obj = frozen_copy(obj, FrozenClass)
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from itertools import repeat
from operator import attrgetter
from types import MemberDescriptorType
from typing import Any, Final, TypeVar

__all__ = ["RETYPE_IN_PLACE", "frozen_copy", "twin"]

RETYPE_IN_PLACE: Final[bool] = getattr(sys, "_is_gil_enabled", lambda: True)()
"""``True`` where retyping a twin in place is cheap (the GIL was on at
import); ``False`` on a free-threaded build, where builders use
``frozen_copy``."""

_T = TypeVar("_T")


def twin(cls: type[_T]) -> type[Any]:
    """The mutable twin of the frozen, slotted class ``cls`` (see the module
    docstring). Raises ``TypeError`` when ``cls`` is not slotted: a twin of
    a class with an instance ``__dict__`` would not be retyped safely."""
    if cls.__dictoffset__ != 0:
        raise TypeError(f"{cls.__name__} is not a slotted class")
    # Both __setattr__ and __delattr__ are object's own, so CPython gives the
    # twin the generic C setattr (one of them inherited from the frozen
    # class would force the slow Python-level slot for both).
    namespace = {
        "__slots__": (),
        "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__,
        "__init__": object.__init__,
        "__module__": cls.__module__,
        "__qualname__": f"{cls.__qualname__}.<twin>",
    }
    return type(f"{cls.__name__}Twin", (cls,), namespace)


# For each frozen class `frozen_copy` was given: the member descriptors of
# its slots, its own and its bases' (`__weakref__` is a getset descriptor,
# not a member), and one C-level getter of all their values. Made once per
# class.
_COPIERS: dict[type, tuple[tuple[Any, ...], Callable[[Any], Any]]] = {}
_new: Final = object.__new__
_set_slot: Final = MemberDescriptorType.__set__


def _copier(cls: type) -> tuple[tuple[Any, ...], Callable[[Any], Any]]:
    copier = _COPIERS.get(cls)
    if copier is None:
        members = tuple(
            member for klass in cls.__mro__ for member in vars(klass).values() if type(member) is MemberDescriptorType
        )
        names = [member.__name__ for member in members]
        get_one = attrgetter(*names) if names else (lambda obj: ())
        get = get_one if len(names) != 1 else (lambda obj: (get_one(obj),))
        copier = _COPIERS[cls] = (members, get)
    return copier


def frozen_copy(obj: Any, cls: type[_T]) -> _T:
    """A new instance of the frozen, slotted class ``cls`` holding every set
    slot of ``obj`` (an instance of ``twin(cls)``), made without running
    ``cls.__init__`` and without assigning ``__class__``: how a builder
    finishes a twin on a free-threaded build (module docstring). Runs in
    the calling thread; raises nothing for a twin of ``cls``."""
    members, get = _copier(cls)
    new = _new(cls)
    try:
        values = get(obj)
    except AttributeError:  # a slot never set on the twin stays unset
        for member in members:
            try:
                _set_slot(member, new, member.__get__(obj))
            except AttributeError:
                pass
    else:
        # Every slot in one C loop (the values, then one store each).
        deque(map(_set_slot, members, repeat(new), values), maxlen=0)
    return new
