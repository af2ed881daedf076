"""The errors selfevo says in one line, and the command-line parser whose mistakes are such errors.

Every error that comes from what the user asked for (a config key, a model name, a benchmark, a file, a setup
option, a dead engine server) is a :class:`SelfevoError`; each keeps its own class and module
(:class:`~selfevo.config.ConfigError`, :class:`~selfevo.models.ModelError`, ...). The commands (``selfevo run``,
``eval``, ``report``, ...) catch :data:`ONE_LINE_ERRORS` and print the message as one line on stderr with exit code 2.
"""
from __future__ import annotations

import argparse


class SelfevoError(Exception):
    """Base of every error selfevo reports as one line (``selfevo: message``, exit code 2) instead of a traceback."""


class UsageError(SelfevoError, ValueError):
    """A command line that cannot be parsed, said in one line."""


# What a command prints as one line (exit code 2): selfevo's own errors and a file the user named that is missing.
ONE_LINE_ERRORS: tuple[type[BaseException], ...] = (SelfevoError, FileNotFoundError)


class OneLineParser(argparse.ArgumentParser):
    """An argparse parser whose errors are one-line :class:`UsageError`\\ s (printed by the command, exit 2)."""

    def error(self, message: str):
        raise UsageError(message)
