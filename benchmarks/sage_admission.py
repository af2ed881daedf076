"""What a SAGE run admitted to its question pool, and what a stricter look says about it.

    python -m benchmarks.sage_admission RUN_DIR [RUN_DIR ...] [--out benchmarks/results/sage_admission.json]

Per run (from ``episodes.jsonl``): the challenge episodes and their admission reasons; the admitted items; how
many of those got their quality score s_q from a Critic score of 1 (Eq. 2 read literally maps 1 to 1.0); how many
fail the generated-item checks of :func:`selfevo.verifiers.validate.check_generated` (words in a math answer,
answer markup in the question, a reference that does not verify against itself); how many were confirmed by at
least one of the run's own N_s sampled solutions matching the reference (r_d < 1); the Critic's score histogram.
Prints one JSON object per run; ``--out`` writes them all.
"""
import argparse
import json
import re
from collections import Counter
from pathlib import Path

from selfevo.algorithms.pool import ADMISSION
from selfevo.types import Task
from selfevo.verifiers.validate import check_generated


def critic_score(episode: dict) -> int | None:
    critic = [t for t in episode["turns"] if t["role"] == "critic"]
    found = re.search(r"\d+", critic[0]["text"]) if critic else None
    return int(found.group(0)) if found else None


def admission(run: Path) -> dict:
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    challenges = [e for e in episodes if e["turns"] and e["turns"][0]["role"] == "challenger"]
    admitted = [e for e in challenges if e.get(ADMISSION) == "admitted"]
    failing = Counter()
    for e in admitted:
        new = e["new_task"]
        reason, _ = check_generated(Task(new["id"], "math", new["question"], new["reference"],
                                         meta={"verifier": "math"}))
        failing[reason] += reason is not None
    return {"run": str(run), "challenges": len(challenges),
            "reasons": dict(Counter(e.get(ADMISSION) for e in challenges)), "admitted": len(admitted),
            "admitted_from_critic_score_1": sum(critic_score(e) == 1 for e in admitted),
            "admitted_failing_generated_checks": {k: v for k, v in failing.items() if k},
            "admitted_confirmed_by_a_sample": sum(e.get("r_d") is not None and e["r_d"] < 1 for e in admitted),
            "critic_scores": dict(sorted(Counter(str(critic_score(e)) for e in challenges).items()))}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    results = [admission(run) for run in args.runs]
    for r in results:
        print(json.dumps(r))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
