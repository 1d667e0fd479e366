"""--llmgate-shard K/N's split (no engine): disjoint shares that cover the selection for any N, each
reference chain whole in one share, the same split in every job, and bad input one clear line."""

import pytest
from hypothesis import given, settings, strategies as st

from llmgate.runner.shard import Shard, assign, split


@st.composite
def selections(draw):
    """A matrix (entries whose reference is an earlier entry, or none) and a selection of tests: each
    test an entry's (several per entry: tests × boots) or of none."""
    n_entries = draw(st.integers(1, 12))
    ids = [f"e{i}" for i in range(n_entries)]
    refs = {cid: (draw(st.sampled_from([None, *ids[:i]])) if i else None) for i, cid in enumerate(ids)}
    items = draw(st.lists(st.sampled_from([None, *ids]), min_size=0, max_size=60))
    return refs, items


def chain_root(refs, cid):
    while refs[cid] is not None:
        cid = refs[cid]
    return cid


@settings(max_examples=300, deadline=None)
@given(selections(), st.integers(1, 7))
def test_shares_are_disjoint_cover_the_selection_and_keep_chains_whole(sel, n):
    refs, items = sel
    keeps = [split(items, refs, Shard(k, n)) for k in range(1, n + 1)]
    for i in range(len(items)):
        assert sum(keep[i] for keep in keeps) == 1          # every test in exactly one share
    share_of_root: dict[str, int] = {}
    for k, keep in enumerate(keeps, 1):
        for cid, kept in zip(items, keep):
            if kept and cid is not None:
                assert share_of_root.setdefault(chain_root(refs, cid), k) == k   # a chain is never split
            if kept and cid is None:
                assert k == 1                                # tests of no entry: share 1
    # the same selection gives the same split in another job
    assert keeps == [split(list(items), dict(refs), Shard(k, n)) for k in range(1, n + 1)]


def test_longest_first_balances_the_load():
    where = assign({"big": 9, "a": 3, "b": 3, "c": 3}, 2)
    assert where["big"] == 1 and {where["a"], where["b"], where["c"]} == {2}
    assert assign({"x": 1, "y": 1}, 2) == {"x": 1, "y": 2}     # ties by name


@pytest.mark.parametrize("text", ["", "2", "0/2", "3/2", "1/0", "a/b", "1/2/3"])
def test_bad_shard_is_one_clear_line(text):
    with pytest.raises(ValueError, match="--llmgate-shard"):
        Shard.parse(text)


def test_shard_parses():
    assert Shard.parse(" 2 / 4 ") == Shard(2, 4) and str(Shard(2, 4)) == "2/4"


def test_recorded_seconds_balance_the_shares_when_they_time_every_selected_entry():
    items = ["slow", "a", "a", "a", "b", "b", "b"]
    refs = {"slow": None, "a": None, "b": None}
    by_count = [split(items, refs, Shard(k, 2)) for k in (1, 2)]
    assert by_count[0] == [True, True, True, True, False, False, False]      # a, b (3 tests each), then slow onto 1
    secs = {"slow": 600.0, "a": 100.0, "b": 100.0}
    by_time = [split(items, refs, Shard(k, 2), secs) for k in (1, 2)]
    assert by_time[0] == [True] + [False] * 6 and by_time[1] == [False] + [True] * 6
    # an entry the record does not time: the counts decide, for every unit alike
    assert [split(items, refs, Shard(k, 2), {"slow": 600.0}) for k in (1, 2)] == by_count
