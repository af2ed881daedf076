"""The MAESTRO recipe (selfevo.algorithms.maestro): CLPO's masks from a central output, the recipe end to end with
resume, trainers and ablation switches, and ``selfevo eval`` with ``central_adapter``. The protocol is tested in
tests/setups/test_maestro_rounds.py, CLPO in tests/optimizers/test_clpo.py."""
import json
from pathlib import Path

import pytest
import torch

from helpers.maestro_engine import ScriptEngine  # registers engine "maestro_script"
from helpers.paths import DATA, needs_data
from selfevo import cli
from selfevo.algorithms.maestro import clpo_rows, decision_strings, note_finals, span_mask
from selfevo.interaction import Turn
from selfevo.optimizers import OPTIMIZERS, TrainerCfg
from selfevo.types import Completion, Request


# ---- CLPO's masks from a central output ------------------------------------------------------------------------------
def test_clpo_rows_mask_decision_and_rationale_tokens(make_store):
    tok = make_store(agents=("central",)).backbones["tiny-random"].tokenizer
    text = " cand 2 is right.\nChosen: 2\nFinal: \\boxed{5} ok"
    ids = tok(text, add_special_tokens=False)["input_ids"]
    req = Request("central", [{"role": "user", "content": "q"}], prefix="Reason:")
    turn = Turn("central", "central_sample", Completion(req, [1], ids, [0.0] * len(ids), text, "stop"),
                meta={"slate_rewards": [1.0, 0.0, 0.0, 1.0]})
    rows = clpo_rows(tok)(turn)
    pick = lambda mask: tok.decode([i for i, m in zip(ids, mask) if m])  # noqa: E731
    assert pick(rows["decision"]).strip() == "Chosen: 2\nFinal: \\boxed{5}"
    assert pick(rows["rationale"]).strip() == "cand 2 is right."
    assert rows["slate_mean"] == 0.5 and not any(a and b for a, b in zip(rows["decision"], rows["rationale"]))
    assert span_mask([2, 5, 9], (3, 6), 0) == [0.0, 1.0, 1.0] and span_mask([2, 5], None, 0) == [0.0, 0.0]


def test_clpo_rows_of_a_chained_pair(make_store):
    tok = make_store(agents=("central",)).backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    msgs, meta = [{"role": "user", "content": "q"}], {"slate_rewards": [1.0, 0.0, 0.0, 0.0]}

    def turn(role, prefix, text, generated):
        comp = Completion(Request("central", msgs, prefix=prefix), [1], generated, [0.0] * len(generated), text, "stop")
        return Turn("central", role, comp, meta=dict(meta))

    # stage 1: generated through the stop string "Chosen", its text cut before it (as the engines do)
    gen = ids(" cand 2 is right.\nChosen")
    rows = clpo_rows(tok)(turn("central_sample_reason", "Reason:", " cand 2 is right.\n", gen))
    assert tok.decode([i for i, m in zip(gen, rows["rationale"]) if m]).strip() == "cand 2 is right."
    assert rows["rationale"][-3:] == [0.0, 0.0, 0.0] and rows["decision"] == [0.0] * len(gen)  # "\n", "Ch", "osen"
    assert rows["slate_mean"] == 0.25
    # stage 2: only the generated number (not the stop token after it) is decision; the given rationale is prompt
    prefix = "Reason: cand 2 is right.\nChosen: Candidate "
    for text, generated, decision in (("2", "2\n", [1.0, 0.0]), ("12", "12\n", [1.0, 1.0, 0.0]), ("9", "9", [1.0])):
        rows = clpo_rows(tok)(turn("central_sample", prefix, text, ids(generated)))
        assert rows["decision"] == decision and rows["rationale"] == [0.0] * len(decision)

def test_clpo_rows_give_every_candidates_decision_for_the_listwise_choice(make_store):
    tok = make_store(agents=("central",)).backbones["tiny-random"].tokenizer
    ids = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    meta = {"slate_rewards": [1.0, 0.0, 1.0], "slate_finals": ["5", "7", None]}
    assert decision_strings(meta, False) == ["Chosen: 1\nFinal: \\boxed{5}", "Chosen: 2\nFinal: \\boxed{7}",
                                             "Chosen: 3\nFinal: \\boxed{}"]  # no final answer found: empty box
    assert decision_strings(meta, True) == ["1", "2", "3"]  # chained: the number after "Chosen: Candidate "
    with pytest.raises(ValueError, match="3 candidates with 2 final answers"):
        decision_strings({**meta, "slate_finals": ["5", "7"]}, False)
    text = " cand 2 is right.\nChosen: 2\nFinal: \\boxed{7} ok"
    gen = ids(text)
    req = Request("central", [{"role": "user", "content": "q"}], prefix="Reason:")
    turn = Turn("central", "central_sample", Completion(req, [1], gen, [0.0] * len(gen), text, "stop"), meta=meta)
    rows = clpo_rows(tok, choices=True)(turn)
    first = rows["decision"].index(1.0)
    lead = tok.decode(gen[first:], skip_special_tokens=True).split("Chosen")[0]  # "" unless a token spans the label
    assert [tok.decode([i for i in c if i], skip_special_tokens=True) for c in rows["choices"].tolist()] == \
        [lead + s for s in decision_strings(meta, False)]
    assert rows["choice_mask"].sum(-1).tolist() == [len(ids(lead + s)) for s in decision_strings(meta, False)]
    assert rows["choice_reward"].tolist() == [[1.0], [0.0], [1.0]]
    # the row's own decision, re-tokenised, is its own candidate's string: the same tokens the sample generated
    assert ids(lead + decision_strings(meta, False)[1]) == gen[first:first + int(sum(rows["decision"]))]
    # no decision tokens: no candidate decisions (empty tensors)
    none = ids(" no idea")
    bare = Turn("central", "central_sample", Completion(req, [1], none, [0.0] * len(none), " no idea", "stop"),
                meta=meta)
    assert clpo_rows(tok, choices=True)(bare)["choices"].shape[0] == 0
    # chained: the number after the given "Chosen: Candidate " (the stop token after it is not replaced)
    prefix = "Reason: cand 2 is right.\nChosen: Candidate "
    comp = Completion(Request("central", [{"role": "user", "content": "q"}], prefix=prefix), [1], ids("2\n"),
                      [0.0, 0.0], "2", "stop")
    rows = clpo_rows(tok, choices=True, chained=True)(Turn("central", "central_sample", comp, meta=meta))
    assert [[i for i in c if i] for c in rows["choices"].tolist()] == [ids("1"), ids("2"), ids("3")]


def test_note_finals_records_each_samples_slate_answers():
    from selfevo.interaction import Episode
    from selfevo.types import Task

    task = Task("q", "math", "What is 2 + 3?", "5", meta={"verifier": "math"})
    ep = Episode(task)
    msgs = [{"role": "user", "content": "q"}]
    texts = ["so \\boxed{5}", "maybe \\boxed{6}", "no answer"]
    for t in texts:
        ep.turns.append(Turn(None, "execution", Completion(Request(None, msgs), [1], [2], [0.0], t, "stop")))
    refs = {"candidate_0": 2, "candidate_1": 0, "candidate_2": 1}  # displayed order: third, first, second
    ep.turns.append(Turn("central", "central_sample", Completion(Request("central", msgs), [1], [2], [0.0], "x",
                                                                 "stop"), refs=refs))
    from selfevo.verifiers import verify
    assert note_finals(verify)([ep]) == {}
    assert ep.turns[-1].meta["slate_finals"] == [None, "5", "6"]


# ---- the recipe ----------------------------------------------------------------------------------------------------
def question_file(tmp_path: Path) -> Path:
    path = tmp_path / "q.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "domain": "math", "question": f"What is {i} + {i + 2}?",
                                        "reference": str(2 * i + 2)}) + "\n" for i in range(6)))
    return path


def args(tmp_path: Path, out: Path, *extra: str) -> list[str]:
    return ["run", "maestro", "model.backbones=[tiny-random]", "model.dtype=float32", "engine.name=maestro_script",
            "trainer.tasks_per_step=3", "protocol.central_samples=3", "trainer.lr=1e-2", "seed=3",
            f"data.tasks=[{question_file(tmp_path)}]", f"output_dir={out}", *extra]


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.mark.slow
def test_recipe_end_to_end_with_resume(tmp_path):
    out, ref = tmp_path / "run", tmp_path / "ref"
    steady = "trainer.lr_schedule=constant"  # cosine depends on max_steps, which the resumed run raises
    assert cli.main(args(tmp_path, out, "trainer.max_steps=2", steady)) == 0
    assert cli.main(args(tmp_path, out, "trainer.max_steps=3", "resume=true", steady)) == 0
    assert cli.main(args(tmp_path, ref, "trainer.max_steps=3", steady)) == 0
    metrics = lines(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1, 2]
    for m in metrics:
        for key in ("accuracy", "coverage", "identification", "select_parse_failure_rate", "coverage_r1",
                    "identification_r2", "accuracy_r2", "select_parse_failure_rate_r1"):
            assert key in m
        train = m["train"]["central"]
        assert set(train) >= {"choice", "rank", "kl", "entropy"} and train["parameter_updates"] == 1
        assert list(m["train"]) == ["central"]  # frozen execution agents: no adapter, nothing else trains
    strip = lambda m: {k: v for k, v in m.items() if k not in ("rollout_s", "update_s", "step_s")}  # noqa: E731
    assert [strip(m) for m in metrics] == [strip(m) for m in lines(ref / "metrics.jsonl")]  # resume = uninterrupted
    assert (out / "adapters" / "final" / "central" / "adapter_config.json").exists()
    assert sorted(p.name for p in (out / "checkpoint" / "adapters").iterdir()) == ["central"]
    episode = lines(out / "episodes.jsonl")[0]
    assert len(episode["rounds"]) == 2 and "final" in episode  # the cpu preset: R = 2
    samples = [t for t in episode["turns"] if t["role"] == "central_sample"]
    assert samples and all("slate_rewards" in t and t["reward"] is not None for t in samples)


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_recipe_chained_selection_trains_both_stages(tmp_path, monkeypatch):
    import selfevo.algorithms.maestro as recipe
    from safetensors.torch import load_file

    seen, real = [], recipe.clpo_rows

    def spy(tok, *options):  # records the CLPO masks (and candidate decisions) of every row the recipe trains on
        extras = real(tok, *options)

        def rows(turn):
            out = extras(turn)
            seen.append((turn.label, sum(out["decision"]), sum(out["rationale"]), out["choices"].shape[0]))
            return out

        return rows

    monkeypatch.setattr(recipe, "clpo_rows", spy)
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", "protocol.rounds=1", "protocol.central_chain=true")) == 0
    [m] = lines(out / "metrics.jsonl")
    assert m["train"]["central"]["parameter_updates"] == 1 and "select_parse_failure_rate" in m
    # 3 questions × G = 3: nine rationale rows (rationale tokens only) and nine number rows (decision tokens only)
    reasons = [s for s in seen if s[0] == "central_sample_reason"]
    numbers = [s for s in seen if s[0] == "central_sample"]
    assert len(reasons) == len(numbers) == 9 and len(seen) == 18
    assert all(d == 0 and r > 0 for _, d, r, _ in reasons) and all(d > 0 and r == 0 for _, d, r, _ in numbers)
    # the listwise L_choice (the default): each number row scores all N·K = 4 candidates' numbers after its rationale
    assert all(k == 0 for *_, k in reasons) and all(k == 4 for *_, k in numbers)
    assert m["train"]["central"]["choice_rows"] == 9 * 4
    for episode in lines(out / "episodes.jsonl"):
        turns = episode["turns"]
        assert [t["role"] for t in turns] == ["execution"] * 4 + ["central_reason"] + \
            ["central_sample_reason"] * 3 + ["central"] + ["central_sample"] * 3
        assert turns[4]["reward"] is None and turns[8]["reward"] is None  # the greedy pair is not trained
        assert [t["reward"] for t in turns[5:8]] == [t["reward"] for t in turns[9:12]]
        assert all(t["reward"] is not None and "slate_rewards" in t for t in turns[5:8] + turns[9:12])
    state = load_file(str(out / "adapters" / "final" / "central" / "adapter_model.safetensors"))
    assert any(float(v.abs().sum()) > 0 for k, v in state.items() if "lora_B" in k)  # fresh adapters have B = 0

@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_recipe_listwise_choice_without_the_chain(tmp_path):
    """Unchained (the paper's format): each central sample records its slate's final answers, and every sample with
    a ``Chosen:`` line scores all N·K candidates' decision strings after its rationale."""
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", "protocol.rounds=1", "protocol.central_chain=false",
                         "protocol.central_prefix=")) == 0
    [m] = lines(out / "metrics.jsonl")
    samples = [t for e in lines(out / "episodes.jsonl") for t in e["turns"] if t["role"] == "central_sample"]
    assert len(samples) == 9 and all(len(t["slate_finals"]) == 4 for t in samples)
    decided = sum("\nChosen:" in "\n" + t["text"] for t in samples)
    assert decided and m["train"]["central"]["choice_rows"] == 4 * decided


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
@pytest.mark.parametrize("optimizer", ["grpo", "sft", "none"])
def test_baseline_trainers_run(tmp_path, optimizer):
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", f"trainer.optimizer={optimizer}")) == 0
    [m] = lines(out / "metrics.jsonl")
    turns = [t for e in lines(out / "episodes.jsonl") for t in e["turns"]]
    samples = [t for t in turns if t["role"] == "central_sample"]
    reasons = [t for t in turns if t["role"] == "central_sample_reason"]  # the cpu preset chains the selection
    if optimizer == "none":  # prompt only: no training samples are drawn, nothing trains
        assert not samples and not reasons and m["train"] == {} and "coverage" in m
    elif optimizer == "grpo":  # the whole central output, advantages normalised within each slate's G samples
        assert len(samples) == len(reasons) == 3 * 2 * 3 and m["train"]["central"]["parameter_updates"] == 1
    else:  # SFT on the correct selections only (both stages of each: its rationale and its number)
        assert [t["reward"] for t in reasons] == [t["reward"] for t in samples]
        assert m["train"]["central"]["rows"] == 2 * sum(t["reward"] > 0 for t in samples)


@pytest.mark.slow
def test_trainable_executors_and_ablation_config(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(args(tmp_path, out, "trainer.max_steps=1", "protocol.train_executors=true", "n_agents=2",
                         "protocol.k=2", "protocol.rounds=1")) == 0
    [m] = lines(out / "metrics.jsonl")
    assert set(m["train"]) == {"central", "exec0", "exec1"} and "executor_accuracy" in m
    assert (out / "adapters" / "final" / "exec1" / "adapter_config.json").exists()
    for bad, message in ((["protocol.central_mode=gen"], "has no selection to train"),
                         (["clpo.choice=false", "clpo.rank=false"], "CLPO would train nothing")):
        assert cli.main(args(tmp_path, tmp_path / "x", "--dry-run", *bad)) == 2
        assert message in capsys.readouterr().err
    assert cli.main(args(tmp_path, tmp_path / "g", "trainer.max_steps=1", "protocol.central_mode=gen_sc",
                         "trainer.optimizer=none", "protocol.view=reason", "protocol.rounds=1")) == 0


# ---- selfevo eval with the trained central adapter ------------------------------------------------------------------
@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
@needs_data
def test_eval_loads_the_central_adapter(tmp_path, make_store, capsys):
    from selfevo import evaluation
    from selfevo.policy import PolicyStore, StoreSettings

    store = make_store(agents=("c",))
    store.save_adapter("c", tmp_path / "central")
    argv = ["benchmark=gsm8k", "setup=maestro_select", "model.backbones=tiny-random", "limit=2",
            "sampling.max_new_tokens=8", f"output_dir={tmp_path / 'eval'}", f"data_root={DATA}", "rounds=1",
            "n_agents=2", "k=2", f"central_adapter={tmp_path / 'central'}"]
    fresh = PolicyStore(StoreSettings(dtype="float32"))
    [record] = evaluation.run_eval(*evaluation.load_eval_config(argv), store=fresh, engine=ScriptEngine(fresh),
                                   show_progress=False)
    assert record["agents"] == [None, None, "central"] and record["central_adapter"] == str(tmp_path / "central")
    calls = ScriptEngine.calls
    assert {r.agent for r in calls[0]} == {None} and {r.agent for r in calls[1]} == {"central"}
    assert "coverage" in record and "select_parse_failure_rate_r1" in record
    assert cli.main(["eval", "benchmark=gsm8k", "setup=vanilla", f"central_adapter={tmp_path / 'central'}"]) == 2
    assert "setup=maestro_select, which is not selected" in capsys.readouterr().err
    assert cli.main(["eval", "benchmark=gsm8k", "setup=maestro_select", f"central_adapter={tmp_path}"]) == 2
    assert "has no adapter_config.json" in capsys.readouterr().err


def test_clpo_makes_one_pass_per_rollout(tmp_path):
    """Its terms carry no importance ratio: a second pass over a rollout is refused (by the optimizer and, before any
    work, by the recipe's config check), and the paper preset reads "three epochs" as three passes over the data."""
    from selfevo.config import ConfigError, load_config
    from selfevo.algorithms.maestro import MaestroCfg

    with pytest.raises(ConfigError, match="trainer.epochs=3 with trainer.optimizer=clpo"):
        OPTIMIZERS.get("clpo")(TrainerCfg(epochs=3))
    assert cli.main(args(tmp_path, tmp_path / "run", "trainer.epochs=2", "trainer.max_steps=1")) == 2
    cfg = load_config(MaestroCfg, "maestro", "paper", [])
    slates_per_step = cfg.trainer.tasks_per_step * cfg.protocol.rounds
    rows_per_step = slates_per_step * cfg.protocol.central_samples
    assert cfg.trainer.epochs == 1 and cfg.trainer.max_steps == 3 * -(-7473 // cfg.trainer.tasks_per_step)
    # "global batch size 32": 32 slates (CLPO's unit: one slate's G ranked outputs) per parameter update
    assert cfg.trainer.train_batch == 32 * cfg.protocol.central_samples
    assert rows_per_step // cfg.trainer.train_batch == 3  # parameter updates per rollout (was 27 x 3 epochs = 81)


@pytest.mark.slow  # over 1 s on the AVX2 machine: out of the quick subset
def test_sft_then_clpo_with_the_sft_adapter_as_start_and_reference(tmp_path):
    """The paper's pipeline (App. C.1: the KL keeps the policy near "the SFT reference policy"): a run with
    trainer.optimizer=sft, then CLPO from its adapter (model.init_adapters) with that adapter, frozen, as the KL's
    reference (trainer.kl_reference=initial)."""
    from safetensors.torch import load_file

    sft, clpo, base_ref = tmp_path / "sft", tmp_path / "clpo", tmp_path / "base_ref"
    no_dropout = "model.lora.dropout=0.0"  # LoRA dropout would make the policy's own log-probs noisy (KL > 0)
    assert cli.main(args(tmp_path, sft, "trainer.optimizer=sft", "trainer.max_steps=1", no_dropout)) == 0
    start = load_file(str(sft / "adapters" / "final" / "central" / "adapter_model.safetensors"))
    assert any(v.abs().max() > 0 for k, v in start.items() if "lora_B" in k)  # SFT moved it off the identity
    init = f"model.init_adapters={sft / 'adapters' / 'final'}"
    assert cli.main(args(tmp_path, clpo, init, "trainer.kl_reference=initial", "trainer.max_steps=1", no_dropout)) == 0
    assert cli.main(args(tmp_path, base_ref, init, "trainer.max_steps=1", no_dropout)) == 0
    (m,) = lines(clpo / "metrics.jsonl")
    (b,) = lines(base_ref / "metrics.jsonl")
    # one parameter update, KL measured before it: the policy is its reference (0), not the base model (> 0)
    assert m["train"]["central"]["kl"] == pytest.approx(0.0, abs=1e-6) and b["train"]["central"]["kl"] > 1e-4
    ref = load_file(str(clpo / "checkpoint" / "adapters" / "ref_central" / "adapter_model.safetensors"))
    assert all(torch.equal(ref[k], start[k]) for k in start)  # the reference stays the SFT adapter
    end = load_file(str(clpo / "adapters" / "final" / "central" / "adapter_model.safetensors"))
    assert any(not torch.equal(end[k], start[k]) for k in start)  # the policy started there and moved
    assert not (clpo / "adapters" / "final" / "ref_central").exists()
    assert cli.main(args(tmp_path, tmp_path / "bad", "trainer.kl_reference=initial", "trainer.max_steps=1")) == 2
