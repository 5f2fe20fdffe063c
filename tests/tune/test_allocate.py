from kiln.topi.knobs import KnobSpace
from kiln.tune.allocate import first_batch, next_task
from kiln.tune.cost_model import CostModel
from kiln.tune.state import TaskState, estimate
from kiln.tune.tasks import Task


def _state(name: str, weight: int, times: list[float | None]) -> TaskState:
    space = KnobSpace({"v": (tuple(range(10)), 0)})
    st = TaskState(Task(name, name, None, space, "t", weight), CostModel())
    for v, s in enumerate(times):
        st.observe({"v": v}, s)
    st.trials = len(times)
    return st


def test_every_task_gets_a_first_batch_then_trials_follow_the_time():
    states = [_state("a", 1, [1e-3, 2e-3]), _state("b", 1, []), _state("c", 3, [1e-3])]
    assert next_task(states) == 1
    states[1] = _state("b", 1, [1e-6, 2e-6])
    assert next_task(states) == 2  # 3 calls x 1 ms per trial spent beats 1 x 1 ms / 2
    states[2].exhausted = True
    assert next_task(states) == 0
    for st in states:
        st.exhausted = True
    assert next_task(states) is None


def test_tasks_that_never_worked_share_the_trials():
    states = [_state("a", 1, [None, None]), _state("b", 1, [None])]
    assert next_task(states) == 1


def test_first_batch_and_estimate():
    assert first_batch(64, 4, 8) == 8 and first_batch(6, 4, 8) == 1 and first_batch(20, 4, 8) == 5
    states = [_state("a", 2, [4e-3, 1e-3]), _state("b", 1, [None, 3e-3])]
    assert estimate(states, tuned=False) == 2 * 4e-3 + 3e-3  # b's default failed: its best stands in
    assert estimate(states, tuned=True) == 2 * 1e-3 + 3e-3
