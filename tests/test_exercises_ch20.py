"""Chapter 20 checkers: they accept the solutions of book/solutions/ch20.md, reject
typical mistakes with a message that says what is wrong, and their references agree
with schedules and weights worked by hand."""
import math

import pytest

from grpo_lib.exercises.ch20 import (check_behaviour_weight, check_schedule,
                                     check_sync_speedup, reference_behaviour_weight,
                                     reference_schedule)


# ---------------------------------------------------------------- solutions (ch20.md)
def solution_schedule(generate_s, update_s, max_staleness, steps):
    published = [0.0]  # published[v]: when version v became available
    worker = trainer = 0.0
    versions = []
    for s in range(steps):
        start = max(worker, published[max(0, s - max_staleness)])
        versions.append(max(v for v, t in enumerate(published) if t <= start))
        worker = start + generate_s
        trainer = max(trainer, worker) + update_s
        published.append(trainer)
    return versions


def solution_behaviour_weight(prox_logp, behav_logp, cap):
    return [min(math.exp(p - b), cap) for p, b in zip(prox_logp, behav_logp)]


def solution_sync_speedup(metrics):
    later = metrics[metrics["step"] > 1]
    g, u = later["time_generate"].median(), later["time_update"].median()
    return (g + u) / max(g, u)


def test_checkers_accept_the_solutions():
    assert check_schedule(solution_schedule) is True
    assert check_behaviour_weight(solution_behaviour_weight) is True
    assert check_sync_speedup(solution_sync_speedup) is True


# ---------------------------------------------------------------- wrong attempts
def test_schedule_mistakes_are_named():
    with pytest.raises(AssertionError, match="newest one published"):
        check_schedule(lambda g, u, eta, steps: [max(0, s - eta)
                                                 for s in range(steps)])
    with pytest.raises(AssertionError, match="synchronous schedule"):
        check_schedule(lambda g, u, eta, steps: list(range(steps)))


def test_weight_mistakes_are_named():
    with pytest.raises(AssertionError, match="Upside down"):
        check_behaviour_weight(lambda p, b, c: solution_behaviour_weight(b, p, c))
    with pytest.raises(AssertionError, match="Truncate"):
        check_behaviour_weight(lambda p, b, c: [math.exp(x - y)
                                                for x, y in zip(p, b)])


def test_speedup_mistakes_are_named():
    def with_first(m):
        g, u = m["time_generate"].median(), m["time_update"].median()
        return (g + u) / max(g, u)

    def means(m):
        later = m[m["step"] > 1]
        g, u = later["time_generate"].mean(), later["time_update"].mean()
        return (g + u) / max(g, u)

    with pytest.raises(AssertionError, match="warm-up"):
        check_sync_speedup(with_first)
    with pytest.raises(AssertionError, match="medians"):
        check_sync_speedup(means)
    with pytest.raises(AssertionError, match="Upside down"):
        check_sync_speedup(lambda m: 1 / solution_sync_speedup(m))


# ---------------------------------------------------------------- references by hand
def test_schedule_by_hand():
    # sampling 2 s, update 1 s, eta = 2: batch 0 by v0 (ready at 2, update ends 3);
    # batch 1 starts at 2 with v0; batch 2 at 4 with v1 (v1 at 3, v2 at 5) ...
    assert reference_schedule(2.0, 1.0, 2, 5) == [0, 0, 1, 2, 3]
    # sampling 1 s, update 2 s, eta = 1: the worker waits for version s - 1
    assert reference_schedule(1.0, 2.0, 1, 5) == [0, 0, 1, 2, 3]
    assert reference_schedule(1.0, 2.0, 0, 4) == [0, 1, 2, 3]


def test_weight_by_hand():
    w = reference_behaviour_weight([-0.1, -0.01], [-0.5, -3.0], 5.0)
    assert w[0] == pytest.approx(math.exp(0.4), rel=1e-6)
    assert w[1] == pytest.approx(5.0)  # e^2.99 = 19.9, capped
