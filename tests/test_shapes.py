"""selfevo.shapes: the size bins and the counts' arithmetic (copy, difference, sum, JSON)."""
from selfevo.shapes import Shapes, size_bin


def test_size_bins_are_powers_of_two_and_one_and_a_half_times_them():
    assert [size_bin(x) for x in (0, 1, 16, 17, 24, 25, 32, 33, 48, 49, 100, 129, 700, 1025)] == \
        [16, 16, 16, 24, 24, 32, 32, 48, 48, 64, 128, 192, 768, 1536]


def test_counts_keep_the_exact_sum_of_sizes_per_bin():
    s = Shapes()
    s.add("decode", 4, size=100)
    s.add("decode", 4, size=120)  # same rows, same bin (128)
    s.add("decode", 2, size=100)
    s.add("optimizer", size=7)
    assert s.to_json() == {"decode": [[2, 128, 1, 100], [4, 128, 2, 220]], "optimizer": [[16, 1, 7]]}
    assert Shapes.from_json(s.to_json()).to_json() == s.to_json()


def test_difference_is_what_was_counted_since_a_copy_and_sums_add_up():
    s = Shapes()
    s.add("prefill", 3, size=40)
    before = s.copy()
    assert not (s - before)
    s.add("prefill", 3, size=44)
    s.add("train", 4, size=300)
    diff = s - before
    assert diff.to_json() == {"prefill": [[3, 48, 1, 44]], "train": [[4, 384, 1, 300]]}
    assert before.to_json() == {"prefill": [[3, 48, 1, 40]]}  # the copy is independent
    total = before.copy()
    total += diff
    assert total.to_json() == s.to_json()
