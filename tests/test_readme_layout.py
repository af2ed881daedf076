"""README.md stays short and true to the package: its methods table names exactly the registered recipes (methods
and baselines, as ``Recipe.kind`` says), its opening counts them right, its layout block lists exactly the package's
folders, every doc it links exists, and it has no wall of text (at most 150 lines, no paragraph over 8 lines)."""
from __future__ import annotations

import re

from helpers.paths import ROOT
from selfevo.algorithms import RECIPES

README = ROOT / "README.md"
WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five", 6: "six", 7: "seven", 8: "eight"}


def section(text: str, title: str) -> str:
    """The body of the ``## title`` section."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M)
    assert match, f"README has no section '{title}'"
    return match.group(1)


def methods_table(text: str) -> dict[str, bool]:
    """recipe -> whether its row says (baseline), from the Methods table's `selfevo run NAME` cells."""
    rows = [line for line in section(text, "Methods").splitlines() if line.startswith("| ")][1:]  # after the header
    out = {}
    for row in rows:
        (name,) = re.findall(r"`selfevo run (\w+)`", row)
        out[name] = "(baseline)" in row.split("|")[1]
    return out


def kinds(kind: str) -> set[str]:
    return {name for name in RECIPES.names() if RECIPES.get(name).kind == kind}


def test_methods_table_is_the_registry():
    table = methods_table(README.read_text())
    assert set(table) == kinds("method") | kinds("baseline")
    assert {n for n, baseline in table.items() if baseline} == kinds("baseline")


def test_opening_counts_methods_and_baselines():
    opening = README.read_text().split("\n## ")[0]
    n_methods, n_baselines = len(kinds("method")), len(kinds("baseline"))
    assert f"{WORDS[n_methods].capitalize()} published methods and {WORDS[n_baselines]} baselines" in opening


def test_layout_lists_the_package_folders():
    block = section(README.read_text(), "Layout")
    listed = set(re.findall(r"^  (\w+)/", block, re.M))
    folders = {p.name for p in (ROOT / "selfevo").iterdir() if p.is_dir() and not p.name.startswith("__")}
    assert listed == folders
    recipes = re.search(r"algorithms/\s+one file per recipe \(([^)]*)\)", block).group(1)
    assert {r.strip() for r in recipes.split(",")} == set(RECIPES.names())


def test_linked_docs_exist():
    for link in re.findall(r"\]\(((?:docs|examples)/[^)#]*)", README.read_text()):
        assert (ROOT / link).exists(), link


def test_short_paragraphs():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    prose, inside = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            inside = not inside
            continue
        if not inside and not line.startswith("|"):
            prose.append(line)
    paragraphs = "\n".join(prose).split("\n\n")
    longest = max(len(p.strip().splitlines()) for p in paragraphs)
    assert longest <= 8, longest
