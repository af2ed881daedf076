"""Parsers of tagged model output shared by roles: the CoMAS score (Eq. 6), the last ``<tag>...</tag>`` and a 1-10
score in ``<score>`` (SAGE's Critic, MAE's Judge). Fenced blocks, which verifiers read too:
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


_SCALE_BODY = re.compile(r"(\d+)(?:\.0+)?(?:\s*/\s*10)?")


def scale_score(text: str | None) -> Parsed:
    """The integer 1-10 in the LAST ``<score>`` tag (``7``, ``7.0`` and ``7/10`` read as 7), or a failure whose error
    starts with its reason: ``"format: ..."`` (no tag, a body that is not an integer) or ``"out of range: ..."``."""
    body = last_tag(text, "score")
    if body is None:
        return Parsed.failure("format: no <score>...</score> tag")
    match = _SCALE_BODY.fullmatch(body)
    if not match:
        return Parsed.failure(f"format: the last <score> tag holds {body[:40]!r}, not an integer 1-10")
    score = int(match.group(1))
    if not 1 <= score <= 10:
        return Parsed.failure(f"out of range: score {score} is not in 1-10")
    return Parsed.success(score)
