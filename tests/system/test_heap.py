"""heap_frozen: the cycle collector skips what the process held before the block, and only then."""

import gc

from convinit.system.heap import heap_frozen


class Node:
    def __init__(self) -> None:
        self.me = self  # a reference cycle: only the cycle collector frees it


def test_objects_held_before_the_block_are_frozen_inside_it_and_released_after():
    held = Node()
    assert gc.get_freeze_count() == 0
    with heap_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0 and held.me is held


def test_cycles_made_inside_the_block_are_still_collected():
    with heap_frozen():
        made = Node()
        gc.collect()
        assert any(obj is made for obj in gc.get_objects())  # alive while referenced
        del made
        found = gc.collect()
    assert found >= 1  # the cycle made in the block was freed by a pass inside it


def test_a_freeze_already_in_place_is_left_as_it_was():
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        with heap_frozen():
            pass
        assert gc.get_freeze_count() >= before > 0
    finally:
        gc.unfreeze()
