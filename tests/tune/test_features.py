import kiln
from kiln.compiler.fuse import fuse
from kiln.tune.features import LOOP_FEATURES, features, loop_features
from kiln.tune.tasks import extract_tasks, lower_with
from tests.tune.models import tiny_model


def test_features_have_a_fixed_length_and_see_the_schedule():
    task = next(t for t in extract_tasks(fuse(kiln.from_onnx(tiny_model(width=256))), "t") if "relu" in t.name)
    scalar = {**task.default_config, "generic.vector": 1, "generic.parallel_min": 1 << 62}
    wide = {**task.default_config, "generic.vector": 16, "generic.parallel_min": 1 << 10}
    fs, fw = (loop_features(lower_with(task.fn, "k", c, passes=False).func) for c in (scalar, wide))
    names = dict(zip(LOOP_FEATURES, zip(fs, fw)))
    assert names["vector_loops"] == (0, 1) and names["parallel_loops"] == (0, 1)
    assert names["bytes"][0] == names["bytes"][1] > 0
    full = features(wide, task.space, None)
    assert len(full) == len(task.space.knobs) + len(LOOP_FEATURES) and full[-1] == -1
