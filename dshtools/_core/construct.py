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
"""

from __future__ import annotations

from typing import Any, TypeVar

__all__ = ["twin"]

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
