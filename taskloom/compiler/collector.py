"""Compiling without full garbage collections over the objects that were there before."""
from __future__ import annotations

import functools
import gc
from typing import Any, Callable


def sparing_the_collector(compile_: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: while ``compile_`` runs, the cyclic garbage collector leaves alone every
    object that existed before it (the user's model, torch's state). Compiling allocates a
    great many IR nodes, and each full collection they trigger would otherwise walk all of
    those objects again. Objects made while compiling are collected as usual; nothing is
    done where the process froze objects itself (``gc.freeze``), or inside another such call."""
    @functools.wraps(compile_)
    def compile_sparing(*args: Any, **kwargs: Any) -> Any:
        if gc.get_freeze_count():
            return compile_(*args, **kwargs)
        gc.freeze()
        try:
            return compile_(*args, **kwargs)
        finally:
            gc.unfreeze()
    return compile_sparing
