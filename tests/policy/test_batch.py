"""SeqBatch (selfevo.policy.batch): the loss mask covers the completion only; micro_batches keeps groups whole,
trims each micro-batch to its own width and carries the extras with their rows."""
import pytest
import torch

from selfevo.policy import SeqBatch


def test_seqbatch_masks_completion_only():
    b = SeqBatch.build([[1, 2], [3]], [[4, 5, 6], [7]], pad_id=0)
    assert b.input_ids.tolist() == [[1, 2, 4, 5, 6], [3, 7, 0, 0, 0]]
    assert b.loss_mask.tolist() == [[0, 0, 1, 1, 1], [0, 1, 0, 0, 0]]


# ---- SeqBatch.micro_batches --------------------------------------------------------------------------------------
def _batch(lengths, groups=None):
    prompts = [[10 + i] for i in range(len(lengths))]
    completions = [[100 + i] * (n - 1) for i, n in enumerate(lengths)]
    b = SeqBatch.build(prompts, completions, 0)
    b = b.with_extras(row=torch.arange(len(lengths)), tok=b.input_ids.float() * 10 + 0.5)
    return b.with_groups(groups) if groups is not None else b


def _check_rows_travel(full, mbs):
    seen = []
    for mb in mbs:
        width = int(mb.attention_mask.sum(-1).max())
        assert mb.input_ids.shape[1] == width == mb.extras["tok"].shape[1]  # trimmed to its own width
        for j, r in enumerate(mb.extras["row"].tolist()):
            seen.append(r)
            assert torch.equal(mb.input_ids[j], full.input_ids[r, :width])
            assert torch.equal(mb.loss_mask[j], full.loss_mask[r, :width])
            assert torch.equal(mb.extras["tok"][j], full.extras["tok"][r, :width])
            if full.groups is not None:
                assert mb.groups[j] == full.groups[r]
    assert sorted(seen) == list(range(full.input_ids.shape[0]))  # every row exactly once


@pytest.mark.parametrize("lengths", [[3, 9, 8, 7, 2], [9, 2, 3, 4, 8], [5, 5, 5, 5, 5]])
def test_a_slate_of_three_is_never_split_by_micro_batches_of_two(lengths):
    groups = ["a", "slate", "slate", "slate", "b"]
    full = _batch(lengths, groups)
    mbs = full.micro_batches(2)
    _check_rows_travel(full, mbs)
    slate_mbs = [mb for mb in mbs if "slate" in mb.groups]
    assert len(slate_mbs) == 1 and slate_mbs[0].groups == ["slate"] * 3  # whole, and on its own
    assert all(len(mb.groups) <= 2 for mb in mbs if mb is not slate_mbs[0])


def test_groups_pack_several_small_groups_and_never_split_one():
    groups = ["p", "p", "q", "r", "r", "s", "t", "t", "t"]
    full = _batch([4, 6, 3, 8, 2, 5, 7, 7, 1], groups)
    for size in (1, 2, 3, 4, 9):
        mbs = full.micro_batches(size)
        _check_rows_travel(full, mbs)
        where = {}
        for k, mb in enumerate(mbs):
            for g in mb.groups:
                where.setdefault(g, set()).add(k)
            assert len(mb.groups) <= size or len(set(mb.groups)) == 1
        assert all(len(v) == 1 for v in where.values())


def test_without_groups_longest_first():
    lengths = [3, 9, 1, 7, 5, 8]
    full = _batch(lengths)
    mbs = full.micro_batches(4)
    _check_rows_travel(full, mbs)
    assert [mb.input_ids.shape[0] for mb in mbs] == [4, 2]
    order = [lengths[r] for mb in mbs for r in mb.extras["row"].tolist()]
    assert order == sorted(lengths, reverse=True)
    assert [mb.input_ids.shape[1] for mb in mbs] == [9, 3]
    assert all(mb.groups is None for mb in mbs)


def test_with_groups_needs_one_key_per_row():
    with pytest.raises(ValueError, match="2 group keys for 3 rows"):
        _batch([2, 3, 4]).with_groups(["a", "b"])
