"""``selfevo`` on the command line (selfevo.cli): one-line errors with exit status 2, ``ls``, the demo end to end,
options and overrides in any order, ``--dry-run``, and a recipe's ``--help``."""
import json

import pytest

from selfevo import cli, models
from selfevo.algorithms import demo


def test_cli_errors_are_one_line(capsys):
    assert cli.main(["run", "demo", "agent=3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean 'n_agents'" in err
    assert cli.main(["frobnicate"]) == 2
    assert cli.main(["--help"]) == 0
    assert cli.main(["ls"]) == 0
    out = capsys.readouterr().out
    assert "tiny-random" in out
    # the kit's registries: roles with their kind, reward sources, optimizers
    assert "generic.selector         selector" in out and "comas.scorer             scorer" in out
    assert ("reward sources: critic_score, format, interaction_scores, majority_vote, noisy_judge, slate") in out
    assert "optimizers: clpo, grpo, none, reinforce_pp, sft, task_relative" in out


def test_cli_runs_demo_end_to_end(tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["run", "demo", "n_agents=3", "model.backbones=[tiny-random]", "sampling.max_new_tokens=5",
            f"output_dir={out}"]
    assert cli.main(argv) == 0
    lines = [json.loads(x) for x in (out / "transcripts.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and {x["agent"] for x in lines} == {"agent0", "agent1", "agent2"}
    assert "n_agents: 3" in (out / "config.yaml").read_text()
    (launch,) = json.loads((out / "run.json").read_text())
    assert launch["argv"] == ["selfevo", *argv]  # the command line selfevo run passes, not this process's argv


def test_run_options_and_overrides_mix_in_any_order(tmp_path, capsys):
    out = tmp_path / "never"
    argv = ["run", "demo", "--preset", "cpu", "n_agents=2", "--dry-run", f"output_dir={out}", "model.backbones=a,b"]
    assert cli.main(argv) == 0
    printed = capsys.readouterr().out
    assert "n_agents: 2" in printed and "- a\n  - b" in printed and not out.exists()


def test_dry_run_loads_and_writes_nothing(tmp_path, monkeypatch, capsys):
    def fail(*args, **kwargs):
        raise AssertionError("--dry-run must not load models or run the recipe")

    monkeypatch.setattr(models, "resolve", fail)
    monkeypatch.setattr(demo, "main", fail)
    out = tmp_path / "run"
    hub = "model.backbones=[Qwen/Qwen2.5-3B-Instruct]"
    assert cli.main(["run", "demo", "--dry-run", f"output_dir={out}", hub]) == 0
    assert cli.main(["run", "comas", "--preset", "paper", "trainer.max_steps=1", "--dry-run", f"output_dir={out}"]) == 0
    assert "max_steps: 1" in capsys.readouterr().out and not out.exists()


@pytest.mark.parametrize("argv, message", [
    (["run", "demo", "n_agents=0"], "n_agents must be >= 1, got 0"),
    (["run", "demo", "sampling.temperature=-1"], "sampling.temperature must be >= 0, got -1.0"),
    (["run", "demo", "model.backbones=[]"], "model.backbones must not be empty"),
    (["run", "demo", "engine.name=vlm"], "; got 'vlm' (did you mean 'vllm'?)"),  # the engine list grows
    (["run", "demo", "n_agents=1", "model.backbones=[a,b]"], "n_agents must be >= 2"),
    (["run", "comas", "agents=2"], "config key 'agents' in the command line was renamed to 'n_agents'"),
    (["run", "comas", "protocol.variant=nonsense"], "protocol.variant must be one of full, without_evaluation, "
                                                    "without_scoring; got 'nonsense'"),
    (["run", "comas", "trainer.max_steps=-1"], "trainer.max_steps must be >= 1, got -1"),
    (["run", "comas", "--preset", "paper", "trainer.tasks_per_step=0"], "trainer.tasks_per_step must be >= 1, got 0"),
    (["run", "demo", "--bogus"], "unrecognized arguments: --bogus"),
    (["run"], "which recipe?"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(argv, message, tmp_path, capsys):
    out = tmp_path / "run"
    assert cli.main(argv + [f"output_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("selfevo: ") and err.count("\n") == 1 and message in err
    assert not out.exists()


def test_run_recipe_help_lists_every_key_and_the_presets(capsys):
    from selfevo.config import describe

    assert cli.main(["run", "demo", "--help"]) == 0
    printed = capsys.readouterr().out
    assert "presets: cpu (default)" in printed
    for key, _, allowed, help in describe(demo.DemoCfg):
        line = next(x for x in printed.splitlines() if x.split() and x.split()[0] == key)
        assert help in line and allowed[:20] in line
    assert cli.main(["run", "--help"]) == 0 and "--dry-run" in capsys.readouterr().out


def test_sweep_help_says_what_the_command_does_in_a_whole_sentence(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["sweep", "--help"])
    assert stop.value.code == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "and a table that pairs every row with a baseline row on the same held-out items." in said
