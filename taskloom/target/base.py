"""What every target is: plain data naming the hardware generated code is built for.

A target says what a machine offers (a CPU's ISA and caches, a GPU's SMs and shared
memory); it never measures anything and never builds anything. Each kind of target is a
frozen dataclass deriving from :class:`Target`; :mod:`taskloom.target` parses a user's
string (``"cpu -isa=avx2"``, ``"cuda:sm_90"``) into the right one.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from taskloom.errors import TargetError


class Target:
    """Base of every target kind.

    A subclass sets ``kind`` (``"cpu"``, ``"cuda"``) and implements :meth:`key` (a short
    stable name of what the generated code depends on, for build caches, tuning records and
    saved models), :meth:`to_dict` and :meth:`from_dict`, and :meth:`from_string`.
    """

    kind: ClassVar[str] = ""

    def key(self) -> str:
        """A short stable name of the code this target runs, for caches and records."""
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description holding ``kind``; :meth:`from_dict` reverses it."""
        raise NotImplementedError

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Target":
        """Rebuild a target written by :meth:`to_dict` (a saved model's, a record's): every
        field of the kind's dataclass without a default must be there (one added since takes
        its default); a description of another kind is refused."""
        kind = data.get("kind", "cpu") if isinstance(data, dict) else None
        if kind != cls.kind:
            raise TargetError(f"not a {cls.kind} target description: kind={kind!r}")
        fields = [f.name for f in dataclasses.fields(cls)]
        optional = {f.name for f in dataclasses.fields(cls) if f.default is not dataclasses.MISSING}
        missing = [f for f in fields if f not in data and f not in optional]
        if missing:
            raise TargetError(f"{cls.kind} target description lacks {', '.join(missing)}")
        return cls(**{f: data[f] for f in fields if f in data})

    @classmethod
    def from_string(cls, spec: str) -> "Target":
        """Parse a user's target string of this kind."""
        raise NotImplementedError

    def cache_bytes_between_kernels(self) -> int:
        """The bytes of cache that can keep data from one kernel to the next (a graph's
        weights beyond it come from memory on every call)."""
        raise NotImplementedError

    def streams_weights(self, weight_bytes: int) -> bool:
        """Whether a graph with ``weight_bytes`` of weights should have its kernels fetch
        each weight ahead of use (the weights outgrow what stays cached between kernels,
        and the target's templates prefetch). False unless a target says otherwise."""
        return False

    def weights_outgrow_l3(self, weight_bytes: int) -> bool:
        """Whether weights of ``weight_bytes`` come from memory on every call (the analytic
        model of a target's templates then prices their reads so). False unless a target
        says otherwise."""
        return False

    def nhwc_channel_multiple(self) -> int | None:
        """The input channels a convolution needs for the layout pass to run it in NHWC
        (its window then packs by whole vectors); None where the graph keeps its layout."""
        return None

    def nhwc_stems(self) -> bool:
        """Whether a CNN's stem (a window convolution of a few input channels) runs in NHWC
        with the layers it feeds (:func:`taskloom.compiler.passes.layout.is_stem`)."""
        return False

    def writes_blocks_in_place(self) -> bool:
        """Whether a kernel may write its result into a block of a padded or joined tensor
        (:mod:`~taskloom.compiler.placement`), its rows then starting anywhere in a row of
        that tensor."""
        return False

    def nhwc_pads_windows(self) -> bool:
        """Whether an NHWC window convolution with padding reads its input padded ahead (a
        kernel of its own) instead of testing each element of the window for the border."""
        return False

    def nhwc_dtypes(self) -> tuple[str, ...]:
        """The element types whose convolutions the layout pass may run in NHWC."""
        return ("float32",)

    @property
    def is_gpu(self) -> bool:
        """Whether kernels for this target run on a GPU (or its emulator)."""
        return False
