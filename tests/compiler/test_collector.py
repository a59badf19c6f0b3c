"""The collector spared while compiling: objects from before frozen, then given back."""
from __future__ import annotations

import gc

from taskloom.compiler.collector import sparing_the_collector


def test_a_compile_freezes_what_was_there_and_unfreezes_after():
    seen = []

    @sparing_the_collector
    def compile_(x):
        seen.append(gc.get_freeze_count())
        return x + 1

    before = gc.get_freeze_count()
    assert compile_(1) == 2
    assert seen[0] > 0 and gc.get_freeze_count() == before == 0


def test_an_error_still_unfreezes():
    @sparing_the_collector
    def compile_():
        raise ValueError("bad graph")

    try:
        compile_()
    except ValueError:
        pass
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_keeps_them_frozen():
    @sparing_the_collector
    def compile_():
        return gc.get_freeze_count()

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert compile_() == frozen and gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
