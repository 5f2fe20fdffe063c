import shutil

import pytest

from kiln.codegen import CompileCache, build_library

requires_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


@pytest.fixture(scope="session")
def cache(tmp_path_factory) -> CompileCache:
    """One cache for the session, away from the user's ~/.cache/kiln."""
    return CompileCache(tmp_path_factory.mktemp("kiln-cache"))


@pytest.fixture
def compile_fn(cache):
    """Build PrimFuncs into a module and return the function called `name` (the first by default)."""
    def f(*funcs, name=None, **kw):
        return build_library(funcs, "test", cache=cache, **kw).get_function(name or funcs[0].name)

    return f
