"""The interaction runner (selfevo.interaction.runner): keyed seeds independent of batching and serving order, one
engine call per wave, what a turn records, and the errors of misuse. Scripted engines only (no model)."""
import random

import pytest

from selfevo.interaction import Ask, Episode, Runner, Turn, ask, request_seed, run_episodes
from selfevo.roles.base import Parsed
from selfevo.roles.comas import CoMASScorer, CoMASSolver
from selfevo.shapes import Shapes
from selfevo.types import Completion, Request, SamplingParams, Task

TASKS = [Task(f"t{i}", "math", f"What is {i}+{i}?", str(2 * i)) for i in range(4)]
SAMPLING = SamplingParams(max_new_tokens=32, temperature=0.9, top_p=0.8)


def _text_of(r):
    """A completion text that depends only on the request (its seed and its last message), never on position."""
    return f"seed={r.seed} agent={r.agent} last={r.messages[-1]['content'][:40]}"


class SeedEngine:
    """Answers each request from its seed and messages; records every call."""

    def __init__(self, text=_text_of):
        self.text, self.calls = text, []

    def _complete(self, r):
        return Completion(r, [1, 2], [3, 4, 5], [-0.1, -0.2, -0.3], self.text(r), "stop")

    def generate(self, requests):
        self.calls.append(list(requests))
        return [self._complete(r) for r in requests]


class ShuffledEngine(SeedEngine):
    """Serves the requests in a random internal order (as a continuous-batching engine would) but returns the
    completions in request order."""

    def __init__(self, rng_seed=0, **kw):
        super().__init__(**kw)
        self.rng = random.Random(rng_seed)

    def generate(self, requests):
        self.calls.append(list(requests))
        order = list(range(len(requests)))
        self.rng.shuffle(order)
        served = {i: self._complete(requests[i]) for i in order}
        return [served[i] for i in range(len(requests))]


def plain(agent, text, **kw):
    return Ask(agent, "solver", [{"role": "user", "content": text}], **kw)


def multi_wave(ep):
    """Three waves; the second and third depend on earlier texts; episode t1 stops after the first wave."""
    first = yield plain("a0", f"solve {ep.task.question}")
    if ep.task.id == "t1":
        return
    pair = yield [plain("a1", f"review {first.text}"), plain("a2", f"review again {first.text}")]
    yield plain("a0", f"final {pair[0].text} | {pair[1].text}")


def _record(episodes):
    return {e.key: [(t.completion.request.seed, t.text, t.wave, t.slot) for t in e.turns] for e in episodes}


# ---- (a) seeds independent of batching ---------------------------------------------------------------------------
def test_request_seed_is_stable_63_bit_and_keyed():
    s = request_seed("0/3", "k", 1, 0)
    assert s == request_seed("0/3", "k", 1, 0)
    assert 0 <= s < 2 ** 63
    others = {request_seed("0/3", "k", 1, 1), request_seed("0/3", "k", 2, 0), request_seed("0/3", "j", 1, 0),
              request_seed("0/4", "k", 1, 0), request_seed(0, "k", 1, 0)}
    assert s not in others and len(others) == 5


@pytest.mark.parametrize("engine_cls", [SeedEngine, ShuffledEngine])
def test_seeds_and_texts_do_not_depend_on_batching(engine_cls):
    keys = [f"{i}:{t.id}" for i, t in enumerate(TASKS)]
    together_engine = engine_cls()
    together = Runner(together_engine, SAMPLING, seed="7/2").run(
        [Episode(t, key=k) for t, k in zip(TASKS, keys)], multi_wave)
    alone = []
    for t, k in zip(TASKS, keys):
        alone += Runner(engine_cls(), SAMPLING, seed="7/2").run([Episode(t, key=k)], multi_wave)
    assert _record(together) == _record(alone)
    # ... and equal to a different batching again: reversed order of the episodes
    rev = Runner(engine_cls(), SAMPLING, seed="7/2").run(
        [Episode(t, key=k) for t, k in reversed(list(zip(TASKS, keys)))], multi_wave)
    assert _record(rev) == _record(together)
    # the seeds are exactly the documented keyed seeds
    for ep in together:
        for t in ep.turns:
            assert t.completion.request.seed == request_seed("7/2", ep.key, t.wave, t.slot)
    # every request seed differs (no two requests share a random stream)
    seeds = [t.completion.request.seed for e in together for t in e.turns]
    assert len(set(seeds)) == len(seeds)
    # batched together: 3 waves (t1 ends after the first)
    assert [len(c) for c in together_engine.calls] == [4, 6, 3]


def test_shuffled_serving_gives_the_same_result_as_in_order_serving():
    eps_a = Runner(SeedEngine(), SAMPLING, seed=3).run([Episode(t) for t in TASKS], multi_wave)
    eps_b = Runner(ShuffledEngine(rng_seed=5), SAMPLING, seed=3).run([Episode(t) for t in TASKS], multi_wave)
    assert _record(eps_a) == _record(eps_b)


def test_different_runner_seed_or_key_changes_the_seeds():
    a = Runner(SeedEngine(), SAMPLING, seed="0/0").run([Episode(TASKS[0], key="x")], multi_wave)
    b = Runner(SeedEngine(), SAMPLING, seed="0/1").run([Episode(TASKS[0], key="x")], multi_wave)
    c = Runner(SeedEngine(), SAMPLING, seed="0/0").run([Episode(TASKS[0], key="y")], multi_wave)
    seeds = lambda eps: [t.completion.request.seed for t in eps[0].turns]  # noqa: E731
    assert seeds(a) != seeds(b) and seeds(a) != seeds(c)


def test_episode_key_defaults_to_task_id():
    ep = Episode(TASKS[2])
    assert ep.key == "t2"
    Runner(SeedEngine(), SAMPLING, seed=1).run([ep], multi_wave)
    assert ep.turns[0].completion.request.seed == request_seed(1, "t2", 1, 0)


# ---- (b) one engine call per wave --------------------------------------------------------------------------------
def two_waves(ep):
    first = yield plain("a0", "first")
    second = yield [plain("a1", f"second {first.text}"), plain("a2", "third")]
    assert isinstance(first, Turn) and isinstance(second, list) and len(second) == 2
    ep.meta["received"] = (first.text, [t.text for t in second])


def test_one_engine_call_per_wave():
    eng = SeedEngine()
    runner = Runner(eng, SAMPLING, seed=0)
    eps = runner.run([Episode(t) for t in TASKS[:3]], two_waves)
    assert [len(c) for c in eng.calls] == [3, 6]
    assert runner.calls == 2 and runner.generations == 9
    for ep in eps:
        assert [t.agent for t in ep.turns] == ["a0", "a1", "a2"]
        assert ep.meta["received"] == (ep.turns[0].text, [ep.turns[1].text, ep.turns[2].text])
        assert [(t.wave, t.slot) for t in ep.turns] == [(1, 0), (2, 0), (2, 1)]
    # second wave requests are grouped per episode, in episode order
    assert [r.agent for r in eng.calls[1]] == ["a1", "a2"] * 3


def test_episodes_of_different_lengths_keep_working():
    def program(ep):
        n = int(ep.task.id[1:])  # t0: 0 asks, t1: 1, t2: 2, t3: 3
        if n == 0:
            return
            yield  # noqa: unreachable (makes this a generator)
        got = []
        for k in range(n):
            got.append((yield plain("a0", f"{ep.task.id} ask {k}")))
        ep.meta["n"] = len(got)

    eng = SeedEngine()
    runner = Runner(eng, SAMPLING, seed=0)
    eps = runner.run([Episode(t) for t in TASKS], program)
    assert [len(c) for c in eng.calls] == [3, 2, 1]
    assert [len(e.turns) for e in eps] == [0, 1, 2, 3]
    assert [e.meta.get("n") for e in eps] == [None, 1, 2, 3]
    assert [t.wave for t in eps[3].turns] == [1, 2, 3]
    # t3's 3rd call is its own third engine call though the engine call is the runner's third as well
    assert runner.calls == 3 and runner.generations == 6


def test_episode_call_numbers_are_per_episode_not_global():
    def program(ep):
        if ep.task.id == "t1":  # t1 starts late: an empty wave first does not count as a call
            yield []
        yield plain("a0", "x")

    eng = SeedEngine()
    eps = Runner(eng, SAMPLING, seed=0).run([Episode(t) for t in TASKS[:2]], program)
    assert [len(c) for c in eng.calls] == [2]
    assert [t.wave for e in eps for t in e.turns] == [1, 1]


def test_progress_counts_every_wave_of_an_engine_that_only_generates():
    seen = []
    Runner(SeedEngine(), SAMPLING, seed=0, progress=seen.append, status_every=1e9).run(
        [Episode(t) for t in TASKS[:3]], two_waves, label="rollout")
    waves = [(s.label, s.waves, s.wave_requests) for s in seen if s.wave_requests]
    assert waves == [("rollout", 1, 3), ("rollout", 2, 6)]
    assert (seen[-1].wave_requests, seen[-1].waves, seen[-1].done, seen[-1].in_flight) == (0, 2, 9, {})


def test_run_episodes_convenience_keys_by_task_id_or_keys():
    eps = run_episodes(SeedEngine(), TASKS[:2], two_waves, SAMPLING, seed=4)
    assert [e.key for e in eps] == ["t0", "t1"]
    assert eps[0].turns[0].completion.request.seed == request_seed(4, "t0", 1, 0)
    eps = run_episodes(SeedEngine(), TASKS[:2], two_waves, SAMPLING, seed=4, keys=["a", "b"])
    assert [e.key for e in eps] == ["a", "b"]
    assert eps[1].turns[2].completion.request.seed == request_seed(4, "b", 2, 1)


# ---- (c) what a turn records ---------------------------------------------------------------------------------
def test_turn_records_wave_slot_round_refs_meta_and_parse_with_prefix():
    solver = CoMASSolver()
    scorer = CoMASScorer(prefix="<score>", max_new_tokens=7, temperature=0.25)

    def program(ep):
        sol = yield ask(solver, "a0", ep.task, round=3, meta={"tag": "s"})
        scored = yield [ask(scorer, "a1", ep.task, round=3, refs={"solution": sol, "evaluation": 0},
                            solution=sol.text, evaluation="fine"),
                        ask(scorer, "a2", ep.task, label="judge", round=None, refs={"solution": 0},
                            solution=sol.text, evaluation="bad")]
        ep.meta["scored"] = scored

    texts = {"a0": "The answer is \\boxed{2}.", "a1": "2</score>", "a2": "no score"}
    eng = SeedEngine(text=lambda r: texts[r.agent])
    (ep,) = Runner(eng, SAMPLING, seed=0).run([Episode(TASKS[1])], program)
    sol, sc1, sc2 = ep.turns
    assert (sol.wave, sol.slot, sol.round, sol.label, sol.refs, sol.meta) == (1, 0, 3, "solver", {}, {"tag": "s"})
    assert sol.parsed == Parsed.success("The answer is \\boxed{2}.")
    # Turn object in refs -> its index; ints kept as they are
    assert sc1.refs == {"solution": 0, "evaluation": 0} and sc2.refs == {"solution": 0}
    assert (sc1.wave, sc1.slot, sc1.round, sc1.label) == (2, 0, 3, "scorer")
    assert (sc2.wave, sc2.slot, sc2.round, sc2.label) == (2, 1, None, "judge")
    # parsed from prefix + text: "<score>" + "2</score>" -> 2; the text itself is the generated part only
    assert sc1.text == "2</score>" and sc1.parsed.ok and sc1.parsed.value == 2
    assert not sc2.parsed.ok and sc2.parsed.value is None and sc2.parsed.error
    assert ep.meta["scored"] == [sc1, sc2]
    # the role's format options reach the request: prefix, token limit, temperature (top_p from the runner)
    r_sol, r_sc = eng.calls[0][0], eng.calls[1][0]
    assert r_sol.prefix == "" and r_sol.sampling == SAMPLING
    assert r_sc.prefix == "<score>"
    assert (r_sc.sampling.max_new_tokens, r_sc.sampling.temperature, r_sc.sampling.top_p) == (7, 0.25, 0.8)
    assert SAMPLING.max_new_tokens == 32 and SAMPLING.temperature == 0.9  # the runner's settings are not mutated


def test_explicit_sampling_slot_and_no_parser():
    own = SamplingParams(max_new_tokens=5, temperature=0.0, top_p=1.0)

    def program(ep):
        yield [plain("a0", "x", sampling=own, slot=9), plain("a1", "y", max_new_tokens=3)]

    eng = SeedEngine()
    (ep,) = Runner(eng, SAMPLING, seed="s").run([Episode(TASKS[0])], program)
    first, second = ep.turns
    assert eng.calls[0][0].sampling == own
    assert (eng.calls[0][1].sampling.max_new_tokens, eng.calls[0][1].sampling.temperature) == (3, 0.9)
    assert first.slot == 9 and first.completion.request.seed == request_seed("s", "t0", 1, 9)
    assert second.slot == 1 and second.completion.request.seed == request_seed("s", "t0", 1, 1)
    assert first.parsed is None and second.parsed is None


def test_ask_checks_the_roles_context_keys():
    from selfevo.roles.base import RoleError

    with pytest.raises(RoleError, match="does not read context 'evaluation'"):
        ask(CoMASSolver(), "a0", TASKS[0], evaluation="x")


def test_refs_to_an_earlier_wave_by_turn_and_by_index():
    def program(ep):
        a = yield plain("a0", "one")
        b = yield plain("a1", "two", refs={"first": a})
        yield plain("a2", "three", refs={"first": a, "second": b, "by_index": 1})

    (ep,) = Runner(SeedEngine(), SAMPLING, seed=0).run([Episode(TASKS[0])], program)
    assert ep.turns[1].refs == {"first": 0}
    assert ep.turns[2].refs == {"first": 0, "second": 1, "by_index": 1}


# ---- (d) misuse ---------------------------------------------------------------------------------------------
def test_duplicate_episode_keys_are_an_error():
    with pytest.raises(ValueError, match="distinct keys"):
        Runner(SeedEngine(), SAMPLING).run([Episode(TASKS[0]), Episode(TASKS[0])], two_waves)
    with pytest.raises(ValueError, match="distinct keys"):
        Runner(SeedEngine(), SAMPLING).run([Episode(TASKS[0], key="k"), Episode(TASKS[1], key="k")], two_waves)


@pytest.mark.parametrize("bad", ["text", 3, [plain("a0", "x"), "y"], {"ask": 1}, None])
def test_yielding_a_non_ask_is_a_type_error(bad):
    def program(ep):
        yield bad

    with pytest.raises(TypeError, match="must yield an Ask or a list of Asks"):
        Runner(SeedEngine(), SAMPLING).run([Episode(TASKS[0])], program)


def test_yielding_a_non_ask_later_is_a_type_error():
    def program(ep):
        yield plain("a0", "x")
        yield "oops"

    with pytest.raises(TypeError, match="got str"):
        Runner(SeedEngine(), SAMPLING).run([Episode(TASKS[0])], program)


@pytest.mark.parametrize("delta", [-1, 1])
def test_engine_returning_the_wrong_count_is_a_runtime_error(delta):
    class Wrong(SeedEngine):
        def generate(self, requests):
            out = super().generate(requests)
            return out[:-1] if delta < 0 else out + out[:1]

    runner = Runner(Wrong(), SAMPLING)
    with pytest.raises(RuntimeError, match="completions for 3 requests"):
        runner.run([Episode(t) for t in TASKS[:3]], two_waves)
    assert runner.calls == 0


def test_empty_list_yield_is_allowed_and_receives_an_empty_list():
    def program(ep):
        got = yield []
        assert got == []
        turn = yield plain("a0", "x")
        got2 = yield []
        assert got2 == []
        ep.meta["done"] = turn.text

    eng = SeedEngine()
    eps = Runner(eng, SAMPLING).run([Episode(t) for t in TASKS[:2]], program)
    assert [len(c) for c in eng.calls] == [2]
    assert all(e.meta["done"] == e.turns[0].text for e in eps)


def test_only_empty_waves_make_no_engine_call():
    def program(ep):
        yield []
        yield []

    eng = SeedEngine()
    runner = Runner(eng, SAMPLING)
    eps = runner.run([Episode(TASKS[0])], program)
    assert eng.calls == [] and runner.calls == 0 and eps[0].turns == []


def test_no_episodes_makes_no_engine_call():
    eng = SeedEngine()
    assert Runner(eng, SAMPLING).run([], two_waves) == [] and eng.calls == []


# ---- continuous batching -------------------------------------------------------------------------------------------


class StreamEngine(SeedEngine):
    """A continuously batching scripted engine: serves one ready request at a time in a random order, so episodes
    interleave (a late wave of one episode is answered before an early wave of another)."""

    def __init__(self, rng_seed=0, **kw):
        super().__init__(**kw)
        self.rng, self.served = random.Random(rng_seed), []

    def stream(self, source):
        queue = []
        while True:
            queue += source.take()
            if not queue:
                return
            key, r = queue.pop(self.rng.randrange(len(queue)))
            self.served.append(r)
            source.done(key, self._complete(r))


@pytest.mark.parametrize("rng_seed", [0, 1, 2])
def test_continuous_batching_gives_what_waves_give(rng_seed):
    waves = Runner(SeedEngine(), SAMPLING, seed=3)
    want = _record(waves.run([Episode(t) for t in TASKS], multi_wave))
    engine = StreamEngine(rng_seed)
    stream = Runner(engine, SAMPLING, seed=3)
    got = _record(stream.run([Episode(t) for t in TASKS], multi_wave))
    assert got == want
    assert (stream.calls, stream.generations) == (waves.calls, waves.generations) == (3, 13)
    assert not engine.calls  # never a generate call


def test_continuous_batching_interleaves_episodes_and_reports_progress():
    statuses = []
    engine = StreamEngine(0)
    Runner(engine, SAMPLING, seed=0, progress=statuses.append, status_every=0.0).run(
        [Episode(t) for t in TASKS], multi_wave, label="rollout")
    firsts = [r.messages[-1]["content"].startswith("solve") for r in engine.served]
    assert firsts.index(False) < max(i for i, f in enumerate(firsts) if f)  # a 2nd wave before the last 1st one
    # a wave is counted when the first episode asks for the next one (its requests asked by then)
    assert [(s.label, s.waves) for s in statuses if s.wave_requests] == [("rollout", 1), ("rollout", 2),
                                                                         ("rollout", 3)]
    assert statuses[-1].done == 13 and not statuses[-1].in_flight and statuses[-1].tokens == 13 * 3
    assert any(s.in_flight for s in statuses) and "tok/s" in str(statuses[0])


def test_an_engine_that_only_generates_is_served_in_waves():
    """serve_in_waves: every ready request in one generate call, answers back in request order; a generate that
    returns too few completions is an error."""
    from selfevo.engines.base import serve_in_waves

    class Source:
        def __init__(self):
            self.ready, self.got = [(("a", 0), "r0"), (("a", 1), "r1")], []

        def take(self):
            ready, self.ready = self.ready, []
            return ready

        def done(self, key, completion):
            self.got.append((key, completion))
            if key == ("a", 1):
                self.ready = [(("b", 0), "r2")]  # the next wave becomes ready once this one is answered

    calls, source = [], Source()
    serve_in_waves(lambda requests: calls.append(requests) or [r.upper() for r in requests], source)
    assert calls == [["r0", "r1"], ["r2"]]
    assert source.got == [(("a", 0), "R0"), (("a", 1), "R1"), (("b", 0), "R2")]
    with pytest.raises(RuntimeError, match="engine returned 1 completions for 2 requests"):
        serve_in_waves(lambda requests: requests[:1], Source())


def test_an_engine_dropping_a_request_is_an_error():
    class Dropping(StreamEngine):
        def stream(self, source):
            source.take()

    with pytest.raises(RuntimeError, match="still waiting"):
        Runner(Dropping(), SAMPLING).run([Episode(t) for t in TASKS[:2]], two_waves)


class CountingEngine(SeedEngine):
    """Counts like the HF engine: decode counters and forward shapes, one prefill and one decode per request."""

    def __init__(self):
        super().__init__()
        self.counters = {"decode_steps": 0, "decode_rows": 0, "prefill_tokens": 0}
        self.shapes = Shapes()

    def generate(self, requests):
        for r in requests:
            self.counters["decode_steps"] += 1
            self.counters["decode_rows"] += 1
            self.counters["prefill_tokens"] += 2
            self.shapes.add("prefill", 1, size=2)
            self.shapes.add("decode", 1, size=40)
        return super().generate(requests)


def test_runner_keeps_the_engines_counts_of_its_own_runs_only():
    engine = CountingEngine()
    engine.generate([Request("a0", [{"role": "user", "content": "before"}], SAMPLING)])  # not the runner's
    runner = Runner(engine, SAMPLING, seed=3)
    runner.run([Episode(t) for t in TASKS], multi_wave)  # 13 requests
    runner.run([Episode(TASKS[0], key="again")], multi_wave)  # 4 more
    assert runner.shapes.to_json() == {"decode": [[1, 48, 17, 17 * 40]], "prefill": [[1, 16, 17, 34]]}
    assert (runner.decode_steps, runner.prefill_tokens, runner.concurrency) == (17, 34, 1.0)
    assert not Runner(SeedEngine(), SAMPLING).shapes  # an engine without shapes: nothing
