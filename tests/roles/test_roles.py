"""Roles (selfevo.roles): the CoMAS roles (templates per domain and set, history horizon, sanitising, score and
verdict parsing, ablations), then the Role contract (selfevo.roles.base) over every registered role: kinds, declared
context keys, one-line RoleErrors with a suggestion, Context-or-keywords, and what register_role refuses."""
import dataclasses
import re
from dataclasses import dataclass

import pytest

from selfevo.registry import RegistryError
from selfevo.roles import (
    RoleError,
    EMPTY_DISCUSSION, ROLES, CoMASEvaluator, CoMASJudge, CoMASScorer, CoMASSolver, CoMASVerdictEvaluator, HistoryItem,
    Parsed, Role,
    comas_roles, get_role, group_rounds, last_rounds, load_template, parse_verdict, strip_special_tokens,
)
from selfevo.roles.base import CONTEXT_KEYS, ROLE_KINDS, Context, register_role
from selfevo.roles.comas import DOMAINS, TEMPLATE_SETS, comas_domain
from selfevo.roles.parsers import parse_score
from selfevo.types import Task

SETS_DOMAINS = [(s, d) for s in TEMPLATE_SETS for d in DOMAINS]
# a sentence only that domain's templates carry
DOMAIN_MARK = {"math": r"\boxed{n}", "science": "decimal number", "code": "```python"}
SLOT = re.compile(r"\{(problem|discussion|solution|evaluation)\}")


def task(domain="math", question="What is 12 + 35?"):
    return Task(id="t0", domain=domain, question=question)


def rounds(n, evals=1):
    """n rounds; round r has solution S<r> and ``evals`` evaluations E<r>.<j>."""
    items = []
    for r in range(1, n + 1):
        items.append(HistoryItem(f"a{r % 4}", "solution", f"S{r}"))
        items += [HistoryItem(f"a{(r + j) % 4}", "evaluation", f"E{r}.{j}") for j in range(1, evals + 1)]
    return items


def content(messages):
    assert messages[-1]["role"] == "user"
    return messages[-1]["content"]


# ---------------------------------------------------------------- templates render per set and domain
@pytest.mark.parametrize("template_set,domain", SETS_DOMAINS)
def test_solver_renders(template_set, domain):
    text = content(CoMASSolver(template_set=template_set).messages(task(domain), history=rounds(1)))
    assert text.startswith("The problem is presented as follows:\nWhat is 12 + 35?\n\n")
    assert "Current discussion on the problem is presented as follows for your reference:\n=== Discussion 1 ===" in text
    assert "Solution: S1\nEvaluation: E1.1" in text
    assert DOMAIN_MARK[domain] in text
    assert not SLOT.search(text)


@pytest.mark.parametrize("template_set,domain", SETS_DOMAINS)
def test_evaluator_renders(template_set, domain):
    text = content(CoMASEvaluator(template_set=template_set).messages(task(domain), solution="MY SOLUTION",
                                                                  history=rounds(1)))
    assert "What is 12 + 35?" in text
    assert "You are required to evaluate the following solution:\nMY SOLUTION" in text
    assert ("Current discussion" in text) == (template_set == "paper")  # the paper's template shows the history
    assert ("S1" in text) == (template_set == "paper")
    assert ("test cases that cannot be passed" in text) == (domain == "code")
    assert not SLOT.search(text)


@pytest.mark.parametrize("template_set,domain", SETS_DOMAINS)
def test_scorer_renders_without_history(template_set, domain):
    history = rounds(2)
    scorer = CoMASScorer(template_set=template_set)
    with pytest.raises(RoleError, match="does not read context 'history'"):  # the contract keeps history out
        scorer.messages(task(domain), solution="MY SOLUTION", evaluation="MY EVALUATION", history=history)
    text = content(scorer.messages(task(domain), solution="MY SOLUTION", evaluation="MY EVALUATION"))
    assert "What is 12 + 35?" in text and "MY SOLUTION" in text and "MY EVALUATION" in text
    assert "Discussion" not in text and "discussion" not in text
    assert not any(item.text in text for item in history)
    assert text.endswith("<score>1</score>")
    assert ("Keep your decision" in text) == (template_set == "paper")
    assert ("index out of bounds" in text) == (domain == "code")
    assert not SLOT.search(text)


def test_paper_and_released_differ_where_documented():
    t = task("science")
    paper, released = (content(CoMASSolver(template_set=s).messages(t)) for s in ("paper", "released"))
    assert paper == released
    paper = load_template("paper_scorer_science")
    assert "Keep your decision concise and clear." in paper and "\nFor example: The calculation error" in paper
    released = load_template("released_scorer_science")
    assert "Keep your scoring concise and clear." in released and "\n\nFor example:\nThe calculation" in released


def test_every_template_file_is_packaged():
    for s, d in SETS_DOMAINS:
        for role in ("solver", "evaluator", "scorer"):
            assert load_template(f"{s}_{role}_{d}").startswith("The problem is presented as follows:\n{problem}")
    for d in DOMAINS:
        assert "{evaluation}" not in load_template(f"ablation_judge_{d}")
    with pytest.raises(FileNotFoundError):
        load_template("paper_solver_poetry")


def test_empty_history_and_system_prompt():
    msgs = CoMASSolver(system_prompt="You are agent 0.").messages(task(), history=[])
    assert msgs[0] == {"role": "system", "content": "You are agent 0."}
    assert f"for your reference:\n{EMPTY_DISCUSSION}\n\n" in content(msgs)
    assert len(CoMASSolver().messages(task())) == 1  # one user message, as the released code sends


def test_inserted_text_is_not_rescanned():
    t = task(question="Why does {solution} appear? Also \\boxed{x}")
    text = content(CoMASEvaluator().messages(t, solution="it is {evaluation}"))
    assert "Why does {solution} appear? Also \\boxed{x}" in text
    assert "following solution:\nit is {evaluation}" in text


def test_domains_and_aliases():
    assert comas_domain("coding") == "code" and comas_domain("numeric") == "science"
    assert "```python" in content(CoMASSolver().messages(task("coding")))
    assert r"\boxed{n}" in content(CoMASSolver(domain="math").messages(task("mcq")))  # forced domain
    with pytest.raises(ValueError, match="mcq"):
        CoMASSolver().messages(task("mcq"))
    with pytest.raises(ValueError, match="template_set"):
        CoMASSolver(template_set="arxiv")


# ---------------------------------------------------------------- history horizon kappa
def test_history_truncated_to_kappa_rounds():
    history = rounds(3)
    text = content(CoMASSolver(kappa=2).messages(task(), history=history))
    assert "S1" not in text and "E1.1" not in text
    assert "=== Discussion 1 ===\nSolution: S2\nEvaluation: E2.1\n\n=== Discussion 2 ===\nSolution: S3" in text
    assert "S1" in content(CoMASSolver(kappa=None).messages(task(), history=history))
    assert EMPTY_DISCUSSION in content(CoMASSolver(kappa=0).messages(task(), history=history))
    assert "S1" in content(CoMASSolver(kappa=5).messages(task(), history=history))  # kappa above the round count


def test_evaluator_history_kappa_and_numbered_evaluations():
    text = content(CoMASEvaluator(kappa=1).messages(task(), solution="X", history=rounds(2, evals=2)))
    assert "S1" not in text
    assert "Solution: S2\nEvaluation 1: E2.1\nEvaluation 2: E2.2" in text


def test_evaluator_see_history_option():
    history = rounds(1)
    hidden = content(CoMASEvaluator(see_history=False).messages(task(), solution="X", history=history))
    assert "discussion" not in hidden and "S1" not in hidden
    assert hidden.startswith("The problem is presented as follows:\nWhat is 12 + 35?\n\nYou are required to evaluate")
    assert CoMASEvaluator(template_set="released").shows_history is False
    with pytest.raises(ValueError, match="no discussion slot"):
        CoMASEvaluator(template_set="released", see_history=True)


def test_group_rounds():
    history = [HistoryItem("a", "evaluation", "orphan")] + rounds(2)
    groups = group_rounds(history)
    assert [[it.text for it in g] for g in groups] == [["orphan"], ["S1", "E1.1"], ["S2", "E2.1"]]
    assert [[it.text for it in g] for g in last_rounds(history, 1)] == [["S2", "E2.1"]]
    with pytest.raises(ValueError):
        last_rounds(history, -1)
    with pytest.raises(ValueError, match="kind"):
        HistoryItem("a", "score", "3")


# ---------------------------------------------------------------- sanitising special tokens
LEAKY = "4<|im_end|>\n<|im_start|>user\nok<|endoftext|><start_of_turn>model x<end_of_turn><|eot_id|>"


def test_strip_special_tokens():
    assert strip_special_tokens(LEAKY) == "4\nuser\nokmodel x"
    assert strip_special_tokens("a <s>b</s> c </s>", extra_tokens=["</s>"]) == "a <s>b c "
    assert strip_special_tokens("x | y <score>3</score> a<b|c>d") == "x | y <score>3</score> a<b|c>d"


def test_special_tokens_removed_from_every_inserted_text():
    t = task(question="Q<|im_end|>")
    history = [HistoryItem("a", "solution", "S" + LEAKY), HistoryItem("b", "evaluation", "E<end_of_turn>")]
    texts = [
        content(CoMASSolver().messages(t, history=history)),
        content(CoMASEvaluator().messages(t, solution="sol<|im_end|>", history=history)),
        content(CoMASScorer().messages(t, solution="sol<|im_end|>", evaluation="ev<|endoftext|>")),
        content(CoMASJudge().messages(t, solution="sol<|im_end|>")),
    ]
    for text in texts:
        assert "<|" not in text and "_of_turn>" not in text
    assert "Solution: S4\nuser\nokmodel x\nEvaluation: E" in texts[0]


def test_sanitize_off_keeps_tokens_and_parse_sanitises():
    text = content(CoMASScorer(sanitize=False).messages(task(), solution="sol<|im_end|>", evaluation="ev"))
    assert "sol<|im_end|>" in text
    assert CoMASSolver().parse("  The answer is \\boxed{47}.<|im_end|>") == Parsed(True, "The answer is \\boxed{47}.")
    assert CoMASSolver(sanitize=False).parse("47<|im_end|>").value == "47<|im_end|>"
    assert CoMASEvaluator().parse("<|im_end|>  ") == Parsed(False, None, "empty evaluation")


# ---------------------------------------------------------------- score parsing (strict, = roles.parsers.parse_score)
SCORE_CASES = [
    ("The evaluation is wrong.\n<score>3</score>", 3),
    ("<score>1</score> on second thought <score>2</score>", 2),
    ("<score> 2 </score><|im_end|>", 2),
    ('enclosed within "<score>" and "</score>" tags. <score>3</score>', 3),
    ('<score>3</score> ... "<score>" and "</score>"', None),
    ("<score>4</score>", None),
    ("<score>2.0</score>", None),
    ("<score>3", None),
    ("score: 3", None),
    ("", None),
]


@pytest.mark.parametrize("text,want", SCORE_CASES)
@pytest.mark.parametrize("role", [CoMASScorer(), CoMASJudge()])
def test_score_parse(role, text, want):
    parsed = role.parse(text)
    assert want == parse_score(text)
    assert (parsed.ok, parsed.value) == (want is not None, want)
    assert (parsed.error is None) == (want is not None)


def test_score_parse_errors_say_why():
    assert CoMASScorer().parse("score: 3").error == "no <score>...</score> tag"
    assert CoMASScorer().parse("<score>5</score>").error == "the last <score>...</score> tag does not hold 1, 2 or 3"


# ---------------------------------------------------------------- ablations
def test_without_evaluation_judge_sees_question_and_solution_only():
    history = rounds(2)
    for extra in ({"evaluation": "MY EVALUATION"}, {"history": history}):  # the judge reads only the solution
        with pytest.raises(RoleError):
            CoMASJudge().messages(task("science"), solution="MY SOLUTION", **extra)
    text = content(CoMASJudge().messages(task("science"), solution="MY SOLUTION"))
    assert "What is 12 + 35?" in text and "MY SOLUTION" in text
    assert "MY EVALUATION" not in text and "evaluation" not in text.lower()
    assert not any(item.text in text for item in history)
    # App. J (failure mode without evaluation): the judge's output
    out = ("The solution contains significant errors in the equilibrium concentration calculation ...\n"
           "<score>1</score>")
    assert CoMASJudge().parse(out) == Parsed(True, 1)


VERDICT_CASES = [
    ("The calculations are correct, and the final answer is indeed 0.95 V.\n\n<judgment>correct</judgment>", True),
    ("Step 2 divides by the wrong radius.\n<judgment>incorrect</judgment>", False),
    ("<judgment> Correct </judgment>", True),
    ("<judgment>correct</judgment> wait, no: <judgment>incorrect</judgment>", False),  # the last tag decides
    ('tags "<judgment>" and "</judgment>". <judgment>incorrect</judgment>', False),
    ('<judgment>correct</judgment> as asked: "<judgment>" and "</judgment>"', None),  # echo is the last tag
    ("<judgment>partially correct</judgment>", None),
    ("<JUDGMENT>correct</JUDGMENT>", None),
    ("The solution is correct.", None),
    ("<judgment>correct", None),
    ("", None),
]


@pytest.mark.parametrize("text,want", VERDICT_CASES)
def test_verdict_parse(text, want):
    assert parse_verdict(text) is want
    parsed = CoMASVerdictEvaluator().parse(text)
    assert (parsed.ok, parsed.value) == (want is not None, want)


def test_verdict_parse_errors_say_why():
    assert CoMASVerdictEvaluator().parse("fine").error == "no <judgment>...</judgment> tag"
    assert "neither 'correct' nor 'incorrect'" in CoMASVerdictEvaluator().parse("<judgment>ok</judgment>").error


def test_without_scoring_prompt_asks_for_verdict():
    for template_set in TEMPLATE_SETS:
        role = CoMASVerdictEvaluator(template_set=template_set)
        text = content(role.messages(task("code"), solution="def f(): pass"))
        assert "test cases that cannot be passed" in text
        assert text.endswith('"<judgment>" and "</judgment>" tags, e.g. <judgment>incorrect</judgment>.')
        assert not SLOT.search(text)


# ---------------------------------------------------------------- registry and variants
def test_registry_and_protocol():
    assert set(ROLES.names()) >= {"comas.solver", "comas.evaluator", "comas.scorer", "comas.judge",
                                  "comas.verdict_evaluator"}
    role = get_role("comas.solver", kappa=1)
    assert isinstance(role, Role) and isinstance(role, CoMASSolver) and role.kappa == 1 and role.name == "comas.solver"
    with pytest.raises(KeyError, match="comas.scorer"):
        ROLES.get("comas.scorr")


def test_comas_roles_get_the_options_their_fields_name():
    classes = {"solver": CoMASSolver, "evaluator": CoMASEvaluator, "scorer": CoMASScorer}
    full = comas_roles(classes, kappa=1, see_history=False, template_set="released")
    assert {k: type(v) for k, v in full.items()} == classes
    assert full["solver"].kappa == 1 and full["evaluator"].see_history is False
    assert all(r.template_set == "released" for r in full.values())
    assert type(comas_roles({"evaluator": CoMASVerdictEvaluator})["evaluator"]) is CoMASVerdictEvaluator
    with pytest.raises(TypeError, match="see_history"):
        comas_roles({"solver": CoMASSolver, "judge": CoMASJudge}, see_history=True)


# ================================================================ the Role contract over every registered role
_TRIPLET = {"id": "s", "program": "def f(x):\n    return x", "input": "2", "output": "2"}
# one task every role renders: AZR's roles read what they show from meta["azr"] (a deduction task: propose and solve)
TASK = Task("t", "math", "What is 1+1?", "2", meta={"azr": {"kind": "deduction", "references": [_TRIPLET],
                                                             "n_inputs": 2, "triplet": _TRIPLET}})
ROLE_NAMES = ROLES.names()

# a plausible value for every context key
VALUES = {"history": [HistoryItem("a0", "solution", "It is 2.")], "solution": "It is 2.", "evaluation": "Correct.",
          "plan": "Add the numbers.", "candidates": ["It is 2.", "It is 3."], "reference": TASK,
          "broadcast": "Everyone: answer 2.", "subject": "question"}


def typo(key: str) -> str:
    """A near miss of ``key`` (swap two inner letters)."""
    return key[0] + key[2] + key[1] + key[3:]


def test_every_context_key_has_a_test_value():
    assert set(VALUES) == set(CONTEXT_KEYS)


def test_registry_holds_the_documented_roles():
    assert {"comas.solver", "comas.evaluator", "comas.scorer", "comas.judge", "comas.verdict_evaluator"} <= \
        set(ROLE_NAMES)


def test_every_registered_role_class_has_its_own_name():
    import selfevo.roles as roles
    classes = [ROLES.get(name).__name__ for name in ROLE_NAMES]
    assert len(set(classes)) == len(classes), sorted(c for c in classes if classes.count(c) > 1)
    assert roles.Solver.name == "generic.solver" and roles.CoMASSolver.name == "comas.solver"


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_role_kind_name_and_reads(name):
    cls = ROLES.get(name)
    assert issubclass(cls, Role) and cls.name == name
    assert cls.kind in ROLE_KINDS
    assert set(cls.reads) <= set(CONTEXT_KEYS) and len(set(cls.reads)) == len(cls.reads)


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_role_renders_and_parses_with_its_own_keys(name):
    role = get_role(name)
    ctx = role.context(**{k: VALUES[k] for k in role.reads})
    assert isinstance(ctx, Context)
    for messages in (role.messages(TASK, ctx), role.messages(TASK, **{k: VALUES[k] for k in role.reads}),
                     role.messages(TASK)):
        assert messages and all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages)
        assert messages[-1]["role"] == "user"
    for text in ("", "It is 2. <score>3</score>"):
        parsed = role.parse(text, ctx)
        assert isinstance(parsed, Parsed)
        assert (parsed.ok and parsed.error is None) or (not parsed.ok and parsed.value is None and parsed.error)
    assert role.parse("", ctx) == role.parse("", **{k: VALUES[k] for k in role.reads})


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_context_sequences_become_tuples(name):
    role = get_role(name)
    ctx = role.context(**{k: VALUES[k] for k in role.reads if k in ("history", "candidates")})
    assert isinstance(ctx.history, tuple) and isinstance(ctx.candidates, tuple)
    hash(ctx)  # frozen and hashable


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_unread_context_keys_are_one_line_role_errors(name):
    role = get_role(name)
    for key in set(CONTEXT_KEYS) - set(role.reads):
        for call in (lambda: role.context(**{key: VALUES[key]}), lambda: role.messages(TASK, **{key: VALUES[key]}),
                     lambda: role.parse("x", **{key: VALUES[key]})):
            with pytest.raises(RoleError) as err:
                call()
            msg = str(err.value)
            assert "\n" not in msg
            assert f"role '{name}'" in msg and f"context '{key}'" in msg
            assert f"it reads: {', '.join(role.reads) or 'nothing'}" in msg


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_misspelled_context_key_gets_a_suggestion(name):
    role = get_role(name)
    target = role.reads[0] if role.reads else "history"  # a role that reads nothing: suggested among all keys
    bad = typo(target)
    with pytest.raises(RoleError) as err:
        role.context(**{bad: "x"})
    msg = str(err.value)
    assert "\n" not in msg and f"role '{name}'" in msg and f"'{bad}'" in msg
    assert f"did you mean '{target}'?" in msg


def test_unrelated_key_has_no_suggestion():
    with pytest.raises(RoleError) as err:
        get_role("comas.scorer").context(zzzzqqq=1)
    assert "did you mean" not in str(err.value) and "'zzzzqqq'" in str(err.value)


@pytest.mark.parametrize("name", ROLE_NAMES)
def test_context_and_keywords_together_are_an_error(name):
    role = get_role(name)
    key = role.reads[0] if role.reads else "history"
    ctx = Context()
    kw = {key: VALUES[key]}
    for call in (lambda: role.context(ctx, **kw), lambda: role.messages(TASK, ctx, **kw),
                 lambda: role.parse("x", ctx, **kw)):
        with pytest.raises(RoleError, match=rf"role '{name}': pass a Context or keywords, not both"):
            call()


def test_a_built_context_is_used_as_is():
    role = get_role("comas.scorer")
    ctx = Context(solution="S", evaluation="E", history=(HistoryItem("a", "solution", "H"),))
    assert role.context(ctx) is ctx  # not re-checked: a Context is typed already
    assert "S" in role.messages(TASK, ctx)[-1]["content"]


def test_role_errors_are_value_errors():
    assert issubclass(RoleError, ValueError)


# ---- register_role ---------------------------------------------------------------------------------------------
def _role_class(name, kind, reads=()):
    @dataclass
    class Custom(Role):
        def render(self, task, ctx):
            return [{"role": "user", "content": task.question}]

        def read(self, text, ctx):
            return Parsed.success(text)

    Custom.name, Custom.kind, Custom.reads = name, kind, tuple(reads)
    return Custom


@pytest.mark.parametrize("kind", ["oracle", "", "Solver", "solvers"])
def test_bad_kind_cannot_be_registered(kind):
    cls = _role_class("test.bad_kind", kind)
    with pytest.raises(RoleError, match=r"role 'test\.bad_kind' has kind .*; kinds: solver, evaluator"):
        register_role(cls)
    assert "test.bad_kind" not in ROLES


def test_unknown_reads_cannot_be_registered():
    cls = _role_class("test.bad_reads", "solver", reads=("history", "feedback"))
    with pytest.raises(RoleError, match=r"reads unknown context keys \['feedback'\]"):
        register_role(cls)
    assert "test.bad_reads" not in ROLES


def test_a_name_cannot_be_registered_twice():
    cls = _role_class("comas.solver", "solver", reads=("history",))
    with pytest.raises(RegistryError, match="registered twice"):
        register_role(cls)
    assert ROLES.get("comas.solver") is not cls


def test_unknown_role_name_suggests():
    with pytest.raises(RegistryError, match="did you mean 'comas.scorer'"):
        get_role("comas.scorr")


def test_role_options_are_dataclass_fields():
    for name in ROLE_NAMES:
        fields = {f.name for f in dataclasses.fields(ROLES.get(name))}
        assert {"prefix", "max_new_tokens", "temperature"} <= fields
    role = get_role("comas.scorer", prefix="<score>", max_new_tokens=9, temperature=0.5)
    assert (role.prefix, role.max_new_tokens, role.temperature) == ("<score>", 9, 0.5)
