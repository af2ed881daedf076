"""AZR roles (Absolute Zero, arXiv 2505.03335, Sec. 3.2 and App. D): one model proposes and solves code-reasoning
tasks of three kinds on (program, input, output) triplets.

* ``azr.proposer`` (kind "challenger"): deduction and abduction — from K reference triplets, a new program ``f`` in a
  ```` ```python ```` block and one input in an ```` ```input ```` block (parsed: ``{"program", "input"}``);
  induction — for a given program, ``n_inputs`` inputs (the role's option), each in its own ```` ```input ````
  block, and a message in a ```` ```message ```` block (parsed: ``{"inputs", "message"}``). Any other number of
  ```` ```input ```` blocks is a format error (reward −1), as in the released code (with fewer, the solver would get
  fewer hidden tests than the task sets, or none).
* ``azr.solver`` (kind "solver"): deduction — the output of ``f`` for the input, in ```` ```output ````; abduction —
  an input that makes ``f`` return the output, in ```` ```input ````; induction — a program ``f`` in
  ```` ```python ```` matching the shown input/output pairs and the message. Parsed: the block's text.

A role instance handles one task kind (``task_kind``); the task's ``meta["azr"]`` holds what it shows: a propose task
``{"kind", "references": [triplets]}`` (induction: the first reference is the program), a solve task
``{"kind", "triplet"}``. A triplet is ``{"id", "program", "input", "output"}`` (deduction, abduction) or ``{"id",
"program", "inputs", "outputs", "message", "shown"}`` (induction: the first ``shown`` pairs are shown, the rest are
the hidden tests). Parsing only reads the blocks; whether a task is valid or a solution right is decided by running
the code (:mod:`selfevo.verifiers.execute`), by the recipe and the reward sources.

``open_block``: the answer starts with its first block's opening fence (small models do not open it themselves).
Prompts: the paper's (App. D, Figs. 34-39) shortened, with the same blocks; this toolkit's wording.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from selfevo.roles.base import Context, Parsed, Role, RoleError, chat, fill, load_template, register_role
from selfevo.verifiers.azr import ANSWER_BLOCK
from selfevo.verifiers.base import fenced_blocks
from selfevo.types import Task

KINDS = ("deduction", "abduction", "induction")
PROPOSE_BLOCK = {"deduction": "python", "abduction": "python", "induction": "input"}  # the proposer's first block


def azr_meta(task: Task, kind: str) -> dict:
    """The task's ``meta["azr"]``, checked to be of ``kind``."""
    meta = task.meta.get("azr")
    if not isinstance(meta, dict) or meta.get("kind") != kind:
        raise RoleError(f"task {task.id} is not an AZR {kind} task (meta['azr'] = {meta!r})")
    return meta


def show_triplet(t: dict, i: int) -> str:
    """A reference triplet as the proposer sees it (App. D: ``<snippet_i>`` with its three blocks)."""
    return (f"<snippet_{i}>\n```python\n{t['program']}\n```\n```input\n{t['input']}\n```\n```output\n{t['output']}\n"
            f"```\n</snippet_{i}>")


def show_pairs(t: dict) -> str:
    """The shown input/output pairs of an induction triplet."""
    shown = zip(t["inputs"][:t["shown"]], t["outputs"][:t["shown"]])
    return "\n".join(f"```input_{i}\n{a}\n```\n```output_{i}\n{o}\n```" for i, (a, o) in enumerate(shown))


@dataclass
class _KindRole(Role):
    task_kind: str = "deduction"
    open_block: bool = False

    blocks: ClassVar[dict[str, str]] = {}  # the fenced block each kind's answer starts with

    def __post_init__(self) -> None:
        if self.task_kind not in KINDS:
            raise RoleError(f"role '{self.name}': task_kind must be one of {', '.join(KINDS)}, got {self.task_kind!r}")
        if self.open_block and not self.prefix:
            self.prefix = f"```{self.first_block()}\n"

    def first_block(self) -> str:
        return self.blocks[self.task_kind]


@register_role
@dataclass
class AZRProposer(_KindRole):
    """Proposes a task of its kind from the references in ``task.meta["azr"]`` (see the module doc); ``n_inputs``:
    the number of inputs an induction proposal is asked for and must have."""

    banned: tuple[str, ...] = ()
    n_inputs: int = 10

    name: ClassVar[str] = "azr.proposer"
    kind: ClassVar[str] = "challenger"
    reads: ClassVar[tuple[str, ...]] = ()
    blocks: ClassVar[dict[str, str]] = PROPOSE_BLOCK

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n_inputs < 2:
            raise RoleError(f"role '{self.name}': n_inputs must be at least 2 (one shown pair, one hidden test), "
                            f"got {self.n_inputs}")

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        meta = azr_meta(task, self.task_kind)
        template = load_template(f"azr_propose_{self.task_kind}")
        if self.task_kind == "induction":
            return chat(fill(template, n=str(self.n_inputs), program=meta["references"][0]["program"]))
        refs = "\n".join(show_triplet(t, i) for i, t in enumerate(meta["references"]))
        return chat(fill(template, references=refs, banned=", ".join(self.banned) or "(none)"))

    def read(self, text: str, ctx: Context) -> Parsed:
        if self.task_kind == "induction":
            inputs, message = fenced_blocks(text, "input"), fenced_blocks(text, "message")
            if not inputs or not message:
                return Parsed.failure("format: no ```input or no ```message block")
            if len(inputs) != self.n_inputs:
                return Parsed.failure(f"format: {len(inputs)} ```input blocks, not {self.n_inputs}")
            return Parsed.success({"inputs": [i.strip() for i in inputs], "message": message[-1].strip()})
        program, given = fenced_blocks(text, "python"), fenced_blocks(text, "input")
        if not program or not given or not program[0].strip() or not given[-1].strip():
            return Parsed.failure("format: no ```python or no ```input block (or an empty one)")
        return Parsed.success({"program": program[0].rstrip(), "input": given[-1].strip()})


@register_role
@dataclass
class AZRSolver(_KindRole):
    """Solves a task of its kind (the triplet in ``task.meta["azr"]``); the value is its answer block's text."""

    name: ClassVar[str] = "azr.solver"
    kind: ClassVar[str] = "solver"
    reads: ClassVar[tuple[str, ...]] = ()
    blocks: ClassVar[dict[str, str]] = ANSWER_BLOCK

    def render(self, task: Task, ctx: Context) -> list[dict[str, str]]:
        t = azr_meta(task, self.task_kind)["triplet"]
        template = load_template(f"azr_solve_{self.task_kind}")
        if self.task_kind == "induction":
            return chat(fill(template, pairs=show_pairs(t), message=t["message"]))
        return chat(fill(template, program=t["program"], input=t["input"], output=t["output"]))

    def read(self, text: str, ctx: Context) -> Parsed:
        blocks = fenced_blocks(text, self.first_block())
        if not blocks or not blocks[-1].strip():
            return Parsed.failure(f"format: no ```{self.first_block()} block (or an empty one)")
        return Parsed.success(blocks[-1].strip() if self.task_kind != "induction" else blocks[-1].rstrip())


__all__ = ["KINDS", "PROPOSE_BLOCK", "AZRProposer", "AZRSolver", "azr_meta", "show_pairs", "show_triplet"]
