"""The committed effectiveness values (tests/data/effectiveness.json) can catch a lost gain."""
from pyterrier_selfsup.harness.pipelines import PIPELINES
from tests.effectiveness import committed


def test_every_pipeline_that_trains_a_model_has_a_committed_value():
    trained = {name for name, spec in PIPELINES.items() if spec.method}
    assert {run['method'] for run in committed().values()} == trained


def test_each_committed_change_from_the_start_is_over_twice_its_tolerance():
    """So that a run whose change is halved lands outside its tolerance."""
    for key, run in committed().items():
        assert abs(run['nDCG@10'] - run['start']) > 2 * run['tolerance'], key
