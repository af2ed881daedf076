"""Verifiers: ``(task, response) -> Verdict`` callables in a typed registry.

``verify(task, response)`` picks the verifier named by ``task.meta["verifier"]`` if set, else by ``task.domain``.
Built in: ``math`` (math-verify equivalence), ``code`` (sandboxed unit tests), ``mcq`` (option letter),
``numeric`` (5% relative tolerance).
"""
from __future__ import annotations

from typing import Callable

from selfevo.registry import Registry
from selfevo.types import Task
from selfevo.verifiers.base import Verdict, Verifier

_VERIFIERS: Registry[Verifier] = Registry("verifier")


def register_verifier(name: str) -> Callable[[Verifier], Verifier]:
    """Decorator: ``@register_verifier("math")`` on a ``(task, response) -> Verdict`` function."""
    return _VERIFIERS.register(name)


def get_verifier(name: str) -> Verifier:
    """The verifier registered as ``name``; an unknown name raises a one-line error listing the known ones."""
    return _VERIFIERS.get(name)


def verifier_names() -> list[str]:
    return _VERIFIERS.names()


def verify(task: Task, response: str) -> Verdict:
    """Score ``response`` for ``task`` with the verifier its meta or domain names."""
    name = str(task.meta.get("verifier") or task.domain)
    return get_verifier(name)(task, response)


# Importing the modules registers their verifiers.
from selfevo.verifiers import code, math, mcq, numeric  # noqa: E402,F401

__all__ = ["Verdict", "Verifier", "get_verifier", "register_verifier", "verifier_names", "verify"]
