"""Numeric verifier (SciBench): the final number must lie within a relative tolerance (default 5%) of the reference.

Extraction: the last ``\\boxed{...}``, else the text after the last "answer is"/"Answer:", else the last number of
the response. Numbers may be written ``-1.5``, ``+0.60``, ``−2`` (Unicode minus), ``1,000``, ``3.2e-5``,
``3.2 \\times 10^{-5}``, ``3.2 × 10^-5``, ``\\frac{3}{4}``, ``3/4``; LaTeX wrappers (``\\mathrm``, ``\\text``,
``$``) and trailing units are ignored. The reference may be a bare number or MASLab's "1.44, the unit is ...".
If ``task.meta["unit"]`` carries a power of ten (SciBench units such as ``$10^{-6} \\mathrm{~kg}$``), a
response that wrote that factor into the number itself is accepted as well.
"""
from __future__ import annotations

import math
import re

from selfevo.types import Task
from selfevo.verifiers.base import Verdict, fail, register_verifier
from selfevo.verifiers.math import last_boxed

DEFAULT_REL_TOL = 0.05
_ZERO_ABS_TOL = 1e-8  # when the reference is exactly 0
_MANTISSA = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d*)?|[-+]?\.\d+"
_EXPONENT = r"(?:\s*(?:[eE]\s*([-+]?\d+)|(?:\\times|\\cdot|×|\*|x)\s*10\s*\^\s*\{?\s*([-+]?\d+)\s*\}?))?"
_NUMBER_RE = re.compile(rf"({_MANTISSA}){_EXPONENT}")
_FRACTION_RE = re.compile(r"\\[dt]?frac\s*\{\s*([^{}]+?)\s*\}\s*\{\s*([^{}]+?)\s*\}"
                          r"|([-+]?\d+(?:\.\d+)?)\s*/\s*(\d+(?:\.\d+)?)")


def clean_latex(text: str) -> str:
    """Normalise minus signs and drop ``$``, ``\\left``/``\\right``, ``\\!`` and ``\\,`` spacing."""
    text = text.replace("−", "-").replace("–", "-").replace("$", "")
    text = re.sub(r"\\(?:left|right|!|,|;|quad|qquad)", " ", text)
    return text.replace("{,}", ",")


def parse_number(text: str) -> float | None:
    """The first number in ``text`` (fractions and scientific notation included), or None."""
    text = clean_latex(text)
    fraction = _FRACTION_RE.search(text)
    number = _NUMBER_RE.search(text)
    if fraction and (number is None or fraction.start() <= number.start()):
        value = _fraction_value(fraction)
        if value is not None:
            return value
    return _number_value(number) if number else None


def _fraction_value(match: re.Match) -> float | None:
    numerator, denominator = (match.group(1), match.group(2)) if match.group(1) else (match.group(3), match.group(4))
    top, bottom = parse_number(numerator), parse_number(denominator)
    if top is None or bottom in (None, 0.0):
        return None
    return top / bottom


def _number_value(match: re.Match) -> float | None:
    mantissa, exp_e, exp_ten = match.group(1), match.group(2), match.group(3)
    try:
        value = float(mantissa.replace(",", ""))
    except ValueError:
        return None
    exponent = exp_e or exp_ten
    return value * 10.0 ** int(exponent) if exponent else value


def last_number_text(text: str) -> str | None:
    """The last number-like span in ``text`` (with any exponent part), or None."""
    spans = list(_NUMBER_RE.finditer(clean_latex(text)))
    return spans[-1].group(0) if spans else None


def extract_numeric(response: str) -> str | None:
    """The part of a response holding its final number."""
    boxed = last_boxed(response)
    if boxed and parse_number(boxed) is not None:
        return boxed
    phrases = re.findall(r"(?i:answer)\s*(?:is|:)\s*([^\n]+)", response)
    if phrases and parse_number(phrases[-1]) is not None:
        return phrases[-1].strip()
    return last_number_text(response)


def reference_number(reference: str) -> float | None:
    """The gold number of a reference ("2.53", "+0.60", "1.44, the unit is m/s.")."""
    return parse_number(reference.split("the unit is")[0])


def unit_power_of_ten(unit: str) -> int:
    """The power of ten a SciBench unit string carries (``$10^{-6} \\mathrm{~kg}$`` -> -6), else 0."""
    match = re.search(r"10\s*\^\s*\{?\s*([-+]?\d+)", unit or "")
    return int(match.group(1)) if match else 0


def within_tolerance(pred: float, gold: float, rel_tol: float = DEFAULT_REL_TOL) -> bool:
    """``|pred - gold| <= rel_tol * |gold|`` (an absolute 1e-8 when gold is 0)."""
    if not (math.isfinite(pred) and math.isfinite(gold)):
        return False
    if gold == 0:
        return abs(pred) <= _ZERO_ABS_TOL
    return abs(pred - gold) <= rel_tol * abs(gold)


@register_verifier("numeric")
def verify_numeric(task: Task, response: str) -> Verdict:
    """1.0 when the response's final number is within the relative tolerance of the reference."""
    gold = reference_number(task.reference)
    if gold is None:
        return fail(f"reference {task.reference!r} holds no number")
    text = extract_numeric(response)
    pred = parse_number(text) if text else None
    if pred is None:
        return fail("no number found in the response")
    rel_tol = float(task.meta.get("rel_tol", DEFAULT_REL_TOL))
    scale = 10.0 ** unit_power_of_ten(str(task.meta.get("unit", "")))
    if within_tolerance(pred, gold, rel_tol) or (scale != 1.0 and within_tolerance(pred, gold * scale, rel_tol)):
        return Verdict(1.0, f"{pred:g} is within {rel_tol:.0%} of {gold:g}", text)
    return fail(f"{pred:g} is not within {rel_tol:.0%} of {gold:g}", text)
