"""The loop's builders (selfevo.loop.build): the run's optimizer gets the config sections its registered factory
names beside the trainer section (CLPO's ``clpo``), without a recipe comparing optimizer names."""
from selfevo.algorithms import RECIPES
from selfevo.config import load_config
from selfevo.loop import build
from selfevo.optimizers.clpo import CHOICE_EXTRAS, ROW_MASKS


def config(recipe: str, *overrides: str):
    return load_config(RECIPES.get(recipe).config_class(), recipe, None, list(overrides))


def test_the_optimizer_gets_the_sections_its_factory_names():
    # MAESTRO's clpo section reaches CLPO: the sampled choice form reads no candidate decisions
    assert build.optimizer(config("maestro")).row_extras == {*ROW_MASKS, *CHOICE_EXTRAS}
    assert build.optimizer(config("maestro", "clpo.choice_form=sampled")).row_extras == set(ROW_MASKS)
    # another optimizer in the same config takes no clpo section (grpo's factory names none)
    grpo = build.optimizer(config("maestro", "trainer.optimizer=grpo", "clpo.choice_form=sampled"))
    assert grpo.trains and grpo.row_extras == set()
    # a recipe without a clpo section: CLPO with its own defaults (the listwise form)
    assert build.optimizer(config("grpo", "trainer.optimizer=clpo")).row_extras == {*ROW_MASKS, *CHOICE_EXTRAS}
