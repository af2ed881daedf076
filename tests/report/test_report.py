"""``selfevo report``: loading run and eval directories, one-line errors, and the page itself rendered by a real
headless Chromium (a tiny CoMAS run and a tiny ``selfevo eval`` made here); the screenshot stays in pytest's tmp dir."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from helpers.paths import DATA, needs_data
from selfevo import cli
from selfevo.report import build_report
from selfevo.report.load import ReportError, flatten, kind_of, load_metrics, load_run

CHROMIUM = next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


# ---- fast checks on hand-made directories ------------------------------------------------------------------------


def _write_run(path: Path, metrics: list[dict], episodes: list[dict]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.yaml").write_text("recipe: comas\nseed: 0\n")
    (path / "run.json").write_text(json.dumps([{"argv": ["selfevo", "run", "comas"], "git_commit": "abc123",
                                                "packages": {"torch": "2"}, "machine": {"cpus": 2}}]))
    (path / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    (path / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return path


def _turn(role, text, **kw):
    return {"agent": "a0", "role": role, "round": 0, "reward": 1.0, "messages": [{"role": "user", "content": "2+2?"}],
            "text": text, "parsed_ok": True, "parse_error": None, "tokens": 3, "finish_reason": "stop", **kw}


def test_flatten_keeps_numeric_leaves_as_dotted_names():
    record = {"reward": {"a0": 0.5, "a1": None}, "train": {"a0": {"loss": 1, "skipped": False}}, "note": "x",
              "rejected": {"format": 2}, "bad": float("nan")}
    assert dict(flatten(record)) == {"reward.a0": 0.5, "reward.a1": None, "train.a0.loss": 1.0,
                                     "rejected.format": 2.0, "bad": None}


def test_metrics_in_columns_and_a_bad_line_is_one_line_error(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "reward": {"a": 1}}\n{"step": 1, "eval": {"accuracy": {"a": 0.5}}}\n')
    assert load_metrics(path) == {"steps": [0, 1], "series": {"reward.a": [1.0, None], "eval.accuracy.a": [None, 0.5]}}
    path.write_text('{"step": 0}\n{"step": 1, "reward": \n')
    with pytest.raises(ReportError, match=r"metrics.jsonl:2: bad metrics line"):
        load_metrics(path)


def test_command_errors_are_one_line_with_exit_2(tmp_path, capsys):
    assert cli.main(["report", str(tmp_path / "missing")]) == 2
    assert capsys.readouterr().err.strip() == f"selfevo report: {tmp_path / 'missing'}: no such directory"
    (tmp_path / "other").mkdir()
    assert cli.main(["report", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "neither a run directory" in err
    run = _write_run(tmp_path / "run", [{"step": 0}], [])
    (run / "metrics.jsonl").write_text('{"step": 0}\n[1, 2]\n')
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "metrics.jsonl:2: bad metrics line" in err
    assert cli.main(["report"]) == 2 and "which directories?" in capsys.readouterr().err
    assert cli.main(["report", "--help"]) == 0 and "--output FILE" in capsys.readouterr().out


def test_page_is_self_contained_and_verdicts_are_computed(tmp_path, capsys):
    hostile = "</script><script>window.evil=1</script><!-- \u2028"
    episodes = [{"step": 0, "task_id": "gsm8k/train/1", "domain": "math", "question": "2+2?", "reference": "4",
                 "admission": "admitted",
                 "turns": [_turn("solver", "so \\boxed{4}"), _turn("solver", "maybe 5"), _turn("scorer", hostile),
                           _turn("solver", "x", reward=None)]},
                {"step": 1, "task_id": "mbpp/1", "domain": "code", "question": "write f", "reference": "",
                 "turns": [_turn("solver", "def f(): pass")]}]
    run = _write_run(tmp_path / "run", [{"step": 0, "reward": {"a0": 1.0}}, {"step": 1, "reward": {"a0": 0.5}}],
                     episodes)
    assert kind_of(run) == "run"
    page = build_report([run])
    assert "<link" not in page and "<script src" not in page and "@import" not in page and "url(" not in page
    assert hostile not in page and "window.evil=1</script>" not in page  # data cannot close its <script> block
    data = json.loads(page.split('id="ep-0-0">', 1)[1].split("</script>", 1)[0])
    turns = data[0]["turns"]
    assert turns[0]["verdict"]["score"] == 1.0 and turns[1]["verdict"]["score"] == 0.0
    assert "verdict" not in turns[2] and turns[2]["text"] == hostile
    code = json.loads(page.split('id="ep-0-1">', 1)[1].split("</script>", 1)[0])[0]["turns"][0]
    assert "verdict" not in code and code["verdict_note"].startswith("code: not verified")
    out = tmp_path / "r.html"
    assert cli.main(["report", str(run), "--output", str(out), "--no-verify"]) == 0
    assert out.is_file() and "report:" in capsys.readouterr().out
    assert cli.main(["report", str(run)]) == 0 and (run / "report.html").is_file()


def test_a_generated_task_is_verified_for_the_labels_its_recipe_names(tmp_path):
    """The labels whose text answers an episode's generated task come from the run's recipe (SAGE's and MAE's
    NEW_TASK_LABELS), not from a label the report spells: in a CoMAS run a 'difficulty' turn is not verified."""
    from selfevo.algorithms import new_task_labels
    from selfevo.algorithms.sage import DIFFICULTY

    assert new_task_labels("sage") == new_task_labels("mae") == {DIFFICULTY}
    assert new_task_labels("comas") == new_task_labels(None) == new_task_labels("nope") == frozenset()
    episode = {"step": 0, "task_id": "s1", "domain": "math", "question": "1+1?", "reference": "2",
               "new_task": {"id": "gen-1", "question": "3+4?", "reference": "7"},
               "turns": [_turn(DIFFICULTY, "\\boxed{7}"), _turn(DIFFICULTY, "\\boxed{8}")]}
    verdicts = {}
    for recipe in ("sage", "comas"):
        run = _write_run(tmp_path / recipe, [{"step": 0}], [episode])
        (run / "config.yaml").write_text(f"recipe: {recipe}\nseed: 0\n")
        turns = load_run(run)["episodes"][0][0]["turns"]
        verdicts[recipe] = [t.get("verdict") for t in turns]
    assert [(v["score"], v["against"]) for v in verdicts["sage"]] == [(1.0, "new_task"), (0.0, "new_task")]
    assert verdicts["comas"] == [None, None]


# ---- a real run, a real eval, a real browser ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_dirs(tmp_path_factory):
    if not os.path.isdir(DATA):
        pytest.skip("benchmark data not found (set SELFEVO_DATA)")
    run, evaluation = tmp_path_factory.mktemp("run") / "comas", tmp_path_factory.mktemp("eval") / "eval"
    assert cli.main(["run", "comas", "model.backbones=[tiny-random]", "model.dtype=float32", "n_agents=2",
                     "trainer.max_steps=2", "trainer.tasks_per_step=2", "sampling.max_new_tokens=6", "data.n_math=4",
                     "data.n_code=2", "data.n_science=2", f"output_dir={run}", "data.tasks=[]", "eval.at_start=false", "eval.every=0"]) == 0
    assert cli.main(["eval", "benchmark=gsm8k", "setup=vanilla", "model.backbones=tiny-random", "limit=2",
                     "sampling.max_new_tokens=4", f"output_dir={evaluation}", f"data_root={DATA}"]) == 0
    return run, evaluation


class _Collect(HTMLParser):
    """Texts of the elements with a given class, ids present, and attributes of <body>."""

    def __init__(self, cls: str):
        super().__init__()
        self.cls, self.stack, self.found, self.ids, self.body = cls, [], [], set(), {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "body":
            self.body = attrs
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        hit = self.cls in (attrs.get("class") or "").split()
        if hit:
            self.found.append("")
        if tag not in ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "wbr"):
            self.stack.append(hit)

    def handle_endtag(self, tag):
        if self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if any(self.stack):
            self.found[-1] += data


def _chromium(*args: str) -> subprocess.CompletedProcess:
    cmd = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
           "--hide-scrollbars", "--virtual-time-budget=5000", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{' '.join(cmd)}: {done.stderr[-2000:]}"
    return done


def _norm(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.slow
@needs_data
def test_report_of_real_run_and_eval_renders_in_headless_chromium(real_dirs, tmp_path):
    run, evaluation = real_dirs
    page = tmp_path / "report.html"
    assert cli.main(["report", str(run), str(evaluation), "--output", str(page)]) == 0
    html = page.read_text()
    first = json.loads((run / "episodes.jsonl").read_text().splitlines()[0])
    item = json.loads((evaluation / "gsm8k-vanilla" / "items.jsonl").read_text().splitlines()[0])
    assert 'class="turn"' not in html  # turns exist only once the script has rendered them
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the page was built but not rendered")
    profile = tmp_path / "chromium-profile"
    dom = _chromium(f"--user-data-dir={profile}", "--dump-dom", page.as_uri()).stdout
    (tmp_path / "dom.html").write_text(dom)
    turns = _Collect("turn-text")
    turns.feed(dom)
    assert "report-error" not in turns.ids, dom.split('id="report-error"', 1)[1][:500]
    assert turns.body.get("data-report-ready") == "1"
    assert {"tab-curves", "tab-transcripts", "tab-eval", "tab-config", "panels", "final-metrics", "task-list",
            "turns", "episode", "eval-item", "item-list"} <= turns.ids
    # the first episode of step 0 is shown: every turn's response, in order, rendered by the page's script
    expected = [_norm(t["text"]) or "(empty response)" for t in first["turns"]]
    assert [_norm(t) for t in turns.found[:len(expected)]] == expected and expected
    items = _Collect("item-final")
    items.feed(dom)
    assert [_norm(t) for t in items.found] == [_norm(item["final_response"])]
    assert item["id"] in dom.split('id="eval-item"', 1)[1][:2000]
    # each response's head: its label and wave; an eval folder written before those keys (role, step) reads the same
    labels, waves = _Collect("turn-role"), [r["wave"] for r in item["responses"]]
    labels.feed(dom)
    assert labels.found[-len(waves):] == [r["label"] for r in item["responses"]] and waves
    assert all(f"wave {w}" in dom.split('id="eval-item"', 1)[1] for w in waves)
    old = tmp_path / "old_eval"
    shutil.copytree(evaluation, old)
    lines = (old / "gsm8k-vanilla" / "items.jsonl").read_text().splitlines()
    for i, line in enumerate(lines):
        rec = json.loads(line)
        rec["responses"] = [{**{k: v for k, v in r.items() if k not in ("label", "wave")}, "role": r["label"],
                             "step": r["wave"]} for r in rec["responses"]]
        lines[i] = json.dumps(rec)
    (old / "gsm8k-vanilla" / "items.jsonl").write_text("\n".join(lines) + "\n")
    page_old = tmp_path / "report_old.html"
    assert cli.main(["report", str(old), "--output", str(page_old)]) == 0
    dom_old = _chromium(f"--user-data-dir={profile}", "--dump-dom", page_old.as_uri()).stdout
    old_labels = _Collect("turn-role")
    old_labels.feed(dom_old)
    assert old_labels.found[-len(waves):] == labels.found[-len(waves):] and "undefined" not in old_labels.found
    assert all(f"wave {w}" in dom_old.split('id="eval-item"', 1)[1] for w in waves)
    shot = tmp_path / "report.png"
    _chromium(f"--user-data-dir={profile}", "--window-size=1400,1600", f"--screenshot={shot}", page.as_uri())
    assert shot.is_file() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


# ---- MAESTRO: the flow of answers between rounds (hand-written run and eval directories) -------------------------


def _round(correct: list[bool], chosen: int | None) -> dict:
    """A MAESTRO round record as the protocol writes it (``chosen`` None: the selection did not parse)."""
    return {"round": 1, "order": list(range(len(correct))), "chosen": chosen, "shown": chosen, "output": chosen or 0,
            "parsed": chosen is not None, "select_parse_failure": chosen is None, "central_final": None,
            "correct": correct, "covered": any(correct), "chosen_correct": chosen is not None and correct[chosen],
            "output_correct": correct[chosen or 0], "explored": 0, "broadcast": "b"}


# outcomes per question over 3 rounds: correct, missed (a correct candidate was there), uncovered, no answer
OUTCOME = {"C": ([True, False], 0), "M": ([True, False], 1), "U": ([False, False], 0), "F": ([True, False], None)}
QUESTIONS = ["CCC", "MCC", "UMC", "FCM", "CMM"]  # round 1 -> 2: 5 distinct flows; round 2 -> 3: 4 distinct flows


def _maestro_dirs(tmp_path: Path) -> tuple[Path, Path]:
    """A MAESTRO run (2 steps: all five questions at step 0, the first two at step 1) and a maestro_select eval."""
    records = [[_round(*OUTCOME[o]) for o in q] for q in QUESTIONS]
    episodes = [{"step": step, "task_id": f"arith/test/{i}", "domain": "math", "question": "1+1?", "reference": "2",
                 "turns": [_turn("execution", "2")], "rounds": records[i], "final": "2"}
                for step, count in ((0, 5), (1, 2)) for i in range(count)]
    run = _write_run(tmp_path / "maestro_run", [{"step": 0, "coverage": 0.8}, {"step": 1, "coverage": 1.0}], episodes)
    (run / "config.yaml").write_text("recipe: maestro\nseed: 0\n")
    combo = tmp_path / "maestro_eval" / "arith-maestro_select"
    combo.mkdir(parents=True)
    (combo / "results.json").write_text(json.dumps({"benchmark": "arith", "setup": "maestro_select", "n": 5,
                                                    "accuracy": 0.6}))
    (combo / "items.jsonl").write_text("".join(json.dumps(
        {"id": f"arith/test/{i}", "prompt": "1+1?", "reference": "2", "responses": [], "final_response": "2",
         "correct": q[-1] == "C", "info": {"rounds": records[i]}}) + "\n" for i, q in enumerate(QUESTIONS)))
    return run, combo.parent


def _report_data(page: str) -> dict:
    return json.loads(page.split('id="report-data">', 1)[1].split("</script>", 1)[0])


def test_maestro_run_and_eval_carry_their_round_flows(tmp_path):
    run, evaluation = _maestro_dirs(tmp_path)
    data = _report_data(build_report([run, evaluation], verify=False))
    flows = data["sources"][0]["flows"]
    assert flows["all"]["n"] == 7 and [s["step"] for s in flows["steps"]] == [0, 1]
    assert flows["steps"][1]["flow"]["columns"][0]["counts"] == {"correct": 1, "missed": 1, "uncovered": 0,
                                                                   "no_answer": 0}
    eval_flows = data["sources"][1]["combos"][0]["flows"]
    assert (eval_flows["n"], eval_flows["rounds"], len(eval_flows["flows"])) == (5, 3, 9)
    assert eval_flows["transitions"][0] == {"from": 1, "to": 2, "correct_correct": 1, "correct_wrong": 1,
                                            "wrong_correct": 2, "wrong_wrong": 1}
    plain = _write_run(tmp_path / "comas", [{"step": 0}], [{"step": 0, "task_id": "t", "turns": []}])
    assert _report_data(build_report([plain], verify=False))["sources"][0]["flows"] is None


class _Sankey(HTMLParser):
    """Per ``svg.sankey``: its attributes and the attributes of its bands (``path.flow-band``) and boxes."""

    def __init__(self):
        super().__init__()
        self.figures: list[dict] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        classes = (attrs.get("class") or "").split()
        if tag == "svg" and "sankey" in classes:
            self.figures.append({"svg": attrs, "bands": [], "boxes": []})
        elif "flow-band" in classes:
            self.figures[-1]["bands"].append(attrs)
        elif "flow-node" in classes:
            self.figures[-1]["boxes"].append(attrs)


@pytest.mark.slow
def test_maestro_report_draws_the_flow_figure_in_headless_chromium(tmp_path):
    run, evaluation = _maestro_dirs(tmp_path)
    page = tmp_path / "report.html"
    assert cli.main(["report", str(run), str(evaluation), "--output", str(page), "--no-verify"]) == 0
    if CHROMIUM is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the page was built but not rendered")
    profile = tmp_path / "chromium-profile"
    dom = _chromium(f"--user-data-dir={profile}", "--dump-dom", page.as_uri() + "#flows").stdout
    (tmp_path / "dom.html").write_text(dom)
    ids = _Collect("flow-panel")
    ids.feed(dom)
    assert "report-error" not in ids.ids, dom.split('id="report-error"', 1)[1][:500]
    assert ids.body.get("data-report-ready") == "1" and "tab-flows" in ids.ids
    figures = _Sankey()
    figures.feed(dom)
    run_all, evaluated = figures.figures  # the run (all steps, shown first), then the eval's combination
    for figure in (run_all, evaluated):
        assert figure["svg"]["data-rounds"] == "3" and int(figure["svg"]["data-bands"]) == len(figure["bands"])
    # the eval: 5 distinct flows from round 1 to 2, 4 from round 2 to 3 (QUESTIONS); boxes: 4 + 2 + 2 outcomes
    assert [b["data-from"] for b in evaluated["bands"]].count("1") == 5 and len(evaluated["bands"]) == 9
    assert sum(int(b["data-count"]) for b in evaluated["bands"]) == 10  # 5 questions × 2 transitions
    assert [(b["data-round"], b["data-state"], b["data-count"]) for b in evaluated["boxes"]] == [
        ("1", "correct", "2"), ("1", "missed", "1"), ("1", "uncovered", "1"), ("1", "no_answer", "1"),
        ("2", "correct", "3"), ("2", "missed", "2"), ("3", "correct", "3"), ("3", "missed", "2")]
    bands = {(b["data-from"], b["data-source"], b["data-target"]): b["data-count"] for b in evaluated["bands"]}
    assert bands[("1", "no_answer", "correct")] == "1" and bands[("2", "correct", "correct")] == "2"
    assert sum(int(b["data-count"]) for b in run_all["bands"]) == 14  # 7 episodes (both steps) × 2 transitions
    shot = tmp_path / "flows.png"
    _chromium(f"--user-data-dir={profile}", "--window-size=1200,1000", f"--screenshot={shot}", page.as_uri() + "#flows")
    assert shot.is_file() and shot.stat().st_size > 10_000
