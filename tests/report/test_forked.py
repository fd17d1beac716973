"""Jobs run side by side in forked children (``report/forked.py``): answers in the jobs'
order whatever order they end in, warnings raised again in that order, a job's exception
raised in the parent, a child killed without an answer a ResourceError."""

from __future__ import annotations

import os
import signal
import time
import warnings

import pytest

from popart_unwind.errors import PlanError, ResourceError, TransformWarning
from popart_unwind.report import forked

pytestmark = pytest.mark.skipif(not forked.available(), reason="needs fork")


def test_answers_come_in_the_jobs_order_and_see_the_parents_memory():
    shared = {"base": 10}  # made before the fork: each child reads its own copy

    def job(k):
        def run():
            time.sleep(0.05 * (4 - k))  # the later jobs end first
            shared["base"] += k  # a child's change never reaches the parent or a sibling
            return shared["base"], os.getpid()
        return run

    started = []
    found = forked.run_forked([job(k) for k in range(5)], 3,
                              lambda index, done: started.append(index))
    assert [value for (value, _), _ in found] == [10, 11, 12, 13, 14]
    assert len({pid for (_, pid), _ in found} | {os.getpid()}) == 6  # a child per job
    assert shared == {"base": 10} and sorted(started) == list(range(5))


def test_warnings_come_back_in_the_jobs_order():
    def job(k):
        def run():
            time.sleep(0.05 * (2 - k))
            warnings.warn(f"job {k}", TransformWarning, stacklevel=1)
            return k
        return run

    found = forked.run_forked([job(k) for k in range(3)], 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _, raised in found:
            forked.raise_again(raised)
    assert [(w.category, str(w.message)) for w in caught] == \
        [(TransformWarning, f"job {k}") for k in range(3)]


def test_meanwhile_runs_here_beside_the_children_that_started_first(tmp_path):
    """The children started before ``meanwhile`` run while it does (each waits for a file
    it writes here) and do not see what it made; a job beyond ``processes`` starts after
    it, forked from this process as it is then."""
    made = {}
    signal_file = tmp_path / "meanwhile ran"

    def waiting(k):
        def run():
            for _ in range(500):  # up to 5 s: a child that cannot see the file fails
                if signal_file.exists():
                    return k, "value" in made
                time.sleep(0.01)
            return k, "timed out"
        return run

    def meanwhile():
        made["value"] = os.getpid()
        signal_file.write_text("")

    found = forked.run_forked([waiting(k) for k in range(3)], 2, meanwhile=meanwhile)
    assert [value for value, _ in found] == [(0, False), (1, False), (2, True)]
    assert made == {"value": os.getpid()}
    assert forked.run_forked([], 2, meanwhile=meanwhile) == []  # no jobs: it runs alone
    assert made == {"value": os.getpid()}


def test_an_exception_meanwhile_ends_the_children_and_is_raised_here():
    began = time.monotonic()

    def fails():
        raise PlanError("the parent's own walk")

    with pytest.raises(PlanError, match="own walk"):
        forked.run_forked([lambda: time.sleep(30)] * 2, 2, meanwhile=fails)
    assert time.monotonic() - began < 10  # the sleeping children were ended, not awaited


def test_a_jobs_exception_is_raised_in_the_parent():
    def fails():
        raise PlanError("op x: no plan")

    with pytest.raises(PlanError, match="op x: no plan"):
        forked.run_forked([lambda: 1, fails, lambda: 3], 2)


def test_an_exception_that_does_not_pickle_comes_back_as_its_traceback():
    class Local(Exception):  # a class pickle cannot find by name
        pass

    def fails():
        raise Local("made in the child")

    with pytest.raises(forked.JobFailed, match="made in the child"):
        forked.run_forked([fails], 1)


def test_a_child_killed_without_an_answer_is_a_resource_error():
    def killed():
        os.kill(os.getpid(), signal.SIGKILL)

    with pytest.raises(ResourceError, match="without an answer"):
        forked.run_forked([killed, lambda: time.sleep(5)], 2)


def test_usable_cores_is_at_least_one():
    assert forked.usable_cores() >= 1


def test_what_the_parent_made_is_frozen_out_of_the_childrens_collector():
    """The parent's objects are out of each child's cyclic collector (``gc.freeze``) while
    the jobs run, and back in it after, an error or not (nothing was frozen before)."""
    import gc

    made = [[] for _ in range(1000)]  # objects the collector tracks, made before the fork
    before = gc.get_freeze_count()

    def frozen():
        return gc.get_freeze_count()

    found = forked.run_forked([frozen, frozen], 2)
    assert all(count >= before + len(made) for count, _ in found)
    assert gc.get_freeze_count() == before

    def fails():
        raise PlanError("no plan")

    with pytest.raises(PlanError):
        forked.run_forked([fails], 1)
    assert gc.get_freeze_count() == before


def test_what_another_froze_stays_frozen():
    """Objects frozen before the jobs (by the caller) stay frozen after them: the jobs
    neither freeze more nor give those back."""
    import gc

    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        made = [[] for _ in range(1000)]  # after the caller's freeze: not frozen
        found = forked.run_forked([gc.get_freeze_count], 1)
        # a child may free some frozen objects as it starts; it froze none of ``made``
        assert found[0][0] < frozen + len(made)
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
