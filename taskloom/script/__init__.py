"""The kernel script: tensor programs written as decorated Python functions.

    from taskloom.script import kernel
    from taskloom.ir import f32, i32, spatial, repeat

    @kernel
    def add(N: i32, a: f32[N], b: f32[N], c: f32[N]):
        for i in parallel(N):
            c[i] = a[i] + b[i]
"""
from taskloom.script.parser import BUILTINS, kernel, parse_function, parse_source

__all__ = ["kernel", "parse_function", "parse_source", "BUILTINS"]
