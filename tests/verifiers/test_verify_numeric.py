"""The numeric verifier (selfevo.verifiers.numeric): parsing numbers in their written forms, the relative tolerance,
and units given as powers of ten."""
import pytest

from selfevo.types import Task
from selfevo.verifiers import get_verifier
from selfevo.verifiers.numeric import parse_number, reference_number, unit_power_of_ten, within_tolerance


@pytest.mark.parametrize("text,value", [
    ("1.5", 1.5), ("+0.60", 0.6), ("−2", -2.0), ("89,034.79", 89034.79), ("3.2e-5", 3.2e-5),
    (r"3.2 \times 10^{-5}", 3.2e-5), ("3.2 × 10^5", 3.2e5), (r"\frac{3}{4}", 0.75), ("3/4", 0.75),
    (r"$5.7 \mathrm{~J}$", 5.7), ("no number", None),
])
def test_parse_number(text, value):
    parsed = parse_number(text)
    assert parsed == pytest.approx(value) if value is not None else parsed is None


def test_numeric_tolerance_and_units():
    assert within_tolerance(104.9, 100.0) and not within_tolerance(105.1, 100.0)
    assert within_tolerance(0.0, 0.0) and not within_tolerance(0.01, 0.0)
    assert reference_number("1.44, the unit is m/s.") == pytest.approx(1.44)
    assert unit_power_of_ten(r"$10^{-6} \mathrm{~kg}$") == -6
    numeric = get_verifier("numeric")
    task = Task("t", "numeric", "q", reference="2.2", meta={"unit": r" $10^{-6} \mathrm{~kg}$"})
    assert numeric(task, r"The mass is \boxed{2.25}").score == 1.0
    assert numeric(task, r"The mass is $2.2 \times 10^{-6}$ kg").score == 1.0
    assert numeric(task, "The answer is 2.4").score == 0.0
    assert numeric(Task("t", "numeric", "q", reference="abc"), "1").score == 0.0
