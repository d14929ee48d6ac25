from rlstack.batcher.packing import select_batch


def test_uniform_groups_come_out_fifo():
    groups = [(i, 4) for i in range(10)]
    assert select_batch(groups, 8) == [0, 1]


def test_not_enough_sequences_gives_none():
    assert select_batch([(0, 4)], 8) is None
    assert select_batch([], 8) is None


def test_mixed_sizes_pack_exactly_where_greedy_would_stall():
    # Greedy oldest-first takes 6 and then cannot reach 8; 4 + 4 does.
    assert select_batch([(0, 6), (1, 4), (2, 4)], 8) == [1, 2]


def test_prefers_the_combination_whose_newest_group_is_oldest():
    groups = [(0, 3), (1, 5), (2, 8), (3, 2)]
    assert select_batch(groups, 8) == [0, 1]


def test_oversized_groups_are_skipped_not_fatal():
    assert select_batch([(0, 16), (1, 8)], 8) == [1]
