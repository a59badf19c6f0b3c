"""Every error taskloom raises derives from :class:`TaskloomError`.

Each message says what was wrong, where (operator and argument, kernel file and line,
input name) and what would be right.
"""
from __future__ import annotations


class TaskloomError(Exception):
    """Base class of all taskloom errors."""


class IRError(TaskloomError):
    """A malformed tensor-program IR node: wrong types, bad arity, unbound variable."""


class MappingError(TaskloomError):
    """An invalid task mapping: a non-positive extent, a bad ``ranks`` permutation, a worker out of range."""


class ScriptError(TaskloomError):
    """Kernel-script source that cannot become IR; the message points at the file and line."""

    def __init__(self, message: str, filename: str | None = None, lineno: int | None = None,
                 source_line: str | None = None):
        self.filename, self.lineno, self.source_line = filename, lineno, source_line
        where = f"{filename}:{lineno}: " if filename and lineno else ""
        text = f"{where}{message}"
        if source_line:
            text += f"\n    {source_line.strip()}"
        super().__init__(text)


class TransformError(TaskloomError):
    """An IR pass met a program it cannot handle."""


class ScheduleError(TaskloomError):
    """A schedule template cannot serve a task or a config (too many registers, bad sizes)."""


class CodegenError(TaskloomError):
    """The IR uses something the chosen backend or target cannot express."""


class TargetError(TaskloomError):
    """A target description that is invalid or does not match the machine."""


class CompileError(TaskloomError):
    """The native compiler failed; carries its message and the generated source path."""

    def __init__(self, message: str, source_path: str | None = None, compiler_output: str = ""):
        self.source_path, self.compiler_output = source_path, compiler_output
        text = message
        if source_path:
            text += f"\n  generated source: {source_path}"
        if compiler_output:
            text += "\n  compiler said:\n" + "\n".join("    " + l for l in compiler_output.strip().splitlines())
        super().__init__(text)


class ArgumentError(TaskloomError):
    """A kernel or compiled model was called with an argument of the wrong kind, shape or dtype."""


class IndexOutOfRange(ArgumentError, IndexError):
    """An index read from data at run time (a gather's, an embedding's) lies outside the
    dimension it indexes; the message names the operator, its argument, the value and the
    valid range. Also an :class:`IndexError`, as torch and numpy raise."""


class AllocationError(TaskloomError):
    """Memory for a tensor or a compiled model's intermediates could not be allocated."""


class OpError(TaskloomError):
    """An operator was applied to arguments it does not accept (shapes, axes, dtypes, sizes)."""


class LoadError(TaskloomError):
    """A built module or saved model could not be loaded (missing, corrupt, built for another target)."""


class FrontendError(TaskloomError):
    """A model from another framework (PyTorch, ONNX) that cannot become a taskloom graph:
    unsupported operators (all listed at once), attributes or dynamic shapes."""


class ResourceError(TaskloomError):
    """A GPU kernel needs more registers, shared memory or threads than its target offers."""
