"""Parsers of tagged model output shared by roles: the CoMAS score (Eq. 6), the last ``<tag>...</tag>`` and a 1-10
scale score in ``<score>`` (SAGE's Critic, MAE's Judge). Fenced blocks, which verifiers read too:
:func:`selfevo.verifiers.base.fenced_blocks`."""
from __future__ import annotations

import re
from functools import lru_cache

from selfevo.roles.base import Parsed

# a <score> opener, then the shortest body that contains no further opener, then the closer
_SCORE_TAG = re.compile(r"<score>((?:(?!<score>).)*?)</score>", re.DOTALL)


def parse_score(text: str | None) -> int | None:
    """CoMAS Eq. 6 ``Extract``, strict: the content of the LAST ``<score>...</score>`` tag, if it is 1, 2 or 3.

    Surrounding whitespace inside the tag is allowed (``<score> 2 </score>``); anything else (no tag, an
    unclosed tag, ``3.0``, ``4``, ``two``, or a last tag that is not a valid score, e.g. the echoed instruction
    ``"<score>" and "</score>"``) gives None. A repeated opener binds to the nearest closer
    (``<score><score>3</score>`` -> 3). Tag names are case-sensitive, as written in the prompt. There is no
    fallback to stray digits (the public fork's fallback makes the Eq. 8 penalty unreachable).
    """
    if not text:
        return None
    tags = _SCORE_TAG.findall(text)
    if not tags:
        return None
    body = tags[-1].strip()
    return int(body) if body in ("1", "2", "3") else None


@lru_cache(maxsize=64)
def _tag_re(tag: str) -> re.Pattern[str]:
    t = re.escape(tag)
    return re.compile(rf"<{t}>((?:(?!<{t}>).)*?)</{t}>", re.DOTALL)


def last_tag(text: str | None, tag: str) -> str | None:
    """The stripped body of the LAST ``<tag>...</tag>`` in ``text`` (a repeated opener binds to the nearest
    closer, as :func:`parse_score`), or None when there is no closed tag."""
    bodies = _tag_re(tag).findall(text or "")
    return bodies[-1].strip() if bodies else None


_NUMBER = r"\d+(?:\.\d+)?"
_SCALE_BODY = re.compile(rf"({_NUMBER})(?:\s*/\s*({_NUMBER}))?")


def scale_score(text: str | None) -> Parsed:
    """The score in the LAST ``<score>`` tag as a number >= 0: an integer or a decimal (``8``, ``8.5``, ``0.9``), or
    a fraction read on the 10-point scale the prompts ask for (``7/10`` -> 7, ``3/5`` -> 6). Its range is left to the
    normalisation (SAGE Eq. 2, :func:`~selfevo.rewards.formulas.sage_norm`). A failure's error starts with
    ``"format: "``: no tag, a body that is not one such number (``seven``, ``-3``, ``8 or 9``), a zero denominator."""
    body = last_tag(text, "score")
    if body is None:
        return Parsed.failure("format: no <score>...</score> tag")
    match = _SCALE_BODY.fullmatch(body)
    if not match or (match.group(2) is not None and float(match.group(2)) == 0):
        return Parsed.failure(f"format: the last <score> tag holds {body[:40]!r}, not a number or a fraction")
    value, denominator = float(match.group(1)), match.group(2)
    return Parsed.success(value if denominator is None else 10 * value / float(denominator))
