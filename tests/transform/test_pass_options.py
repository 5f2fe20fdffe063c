"""PassContext names only passes and config keys that exist: a misspelling is an error naming the
closest names, not an option silently ignored."""

import re
from pathlib import Path

import pytest

import kiln.transform
from kiln.errors import KilnError
from kiln.transform import PASSES, PassContext
from kiln.transform.infra import config_keys


@pytest.mark.parametrize("kw, message", [
    ({"disabled": ["fold-scale-axes"]}, "disabled pass 'fold-scale-axes' is not a pass; did you mean 'fold-scale-axis'"),
    ({"required": ["fuse-op"]}, "required pass 'fuse-op' is not a pass; did you mean 'fuse-ops'"),
    ({"config": {"pack_dense.mr": 4}}, "pass config key 'pack_dense.mr' is read by no pass; did you mean 'pack_dense.nr'"),
])
def test_a_misspelt_name_is_an_error_when_the_context_is_made(kw, message):
    with pytest.raises(KilnError, match=re.escape(message)):
        PassContext(**kw)


def test_a_name_like_no_other_gets_no_suggestion():
    with pytest.raises(KilnError, match=r"^disabled pass 'zzzz' is not a pass$"):
        PassContext(disabled=["zzzz"])


def test_known_names_are_accepted():
    ctx = PassContext(required=["fuse-ops"], disabled=["fold-scale-axis"], config={"pack_dense.nr": 8})
    assert not ctx.should_run(PASSES["fold-scale-axis"])


def test_every_config_key_a_pass_reads_is_declared():
    source = "\n".join(p.read_text() for p in Path(kiln.transform.__file__).parent.glob("*.py"))
    read = set(re.findall(r'config\.get\("([\w.]+)"', source))
    assert read and read <= config_keys()
    assert {"combine_parallel_conv2d.min_num_branches", "combine_parallel_dense.min_num_branches"} <= config_keys()
