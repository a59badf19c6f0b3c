import shutil

import pytest

from taskloom.backend.compiler import compile_shared_library
from taskloom.runtime import load_module
from taskloom.target import CpuTarget

from tests.runtime.kernels import SIGNATURES, SOURCE


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """The path of the test library, built once into a temporary cache."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TASKLOOM_CACHE_DIR", str(root))
        mp.delenv("CC", raising=False)
        lib = compile_shared_library(SOURCE, CpuTarget.host(), name="runtime_tests",
                                     meta={"signatures": SIGNATURES})
    assert lib.is_relative_to(root)
    return lib


@pytest.fixture(scope="session")
def module(built):
    return load_module(built, SIGNATURES)
