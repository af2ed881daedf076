"""A small typed registry: name → object, with one-line errors that suggest the closest name."""
from __future__ import annotations

import difflib
from typing import Callable, Generic, Iterator, TypeVar

from selfevo.errors import SelfevoError

T = TypeVar("T")


class RegistryError(SelfevoError, KeyError):
    def __str__(self) -> str:  # KeyError quotes its message; a registry error is a plain sentence
        return str(self.args[0])


class Registry(Generic[T]):
    """``reg = Registry("engine")``; ``@reg.register("hf")`` on a class or function; ``reg.get("hf")``."""

    def __init__(self, kind: str):
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(obj: T) -> T:
            if name in self._items:
                raise RegistryError(f"{self.kind} '{name}' is registered twice")
            self._items[name] = obj
            return obj

        return add

    def get(self, name: str) -> T:
        if name not in self._items:
            close = difflib.get_close_matches(name, list(self._items), n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise RegistryError(f"unknown {self.kind} '{name}'{hint}; known: {', '.join(sorted(self._items))}")
        return self._items[name]

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: str) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
