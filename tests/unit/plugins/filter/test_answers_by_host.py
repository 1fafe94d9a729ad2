"""answers_by_host: the answer check's answers grouped by the host that keeps each pipeline's reference."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.vllm_omni.serve.plugins.filter.answers_by_host import answers_by_host

RIGHT = "Red, green and blue. Red and green make yellow."


def test_answers_are_grouped_by_the_host_that_serves_each_pipeline():
    pipelines = [{"host": "a", "pipeline_key": "a/omni0"}, {"host": "a", "pipeline_key": "a/omni1"},
                 {"host": "b", "pipeline_key": "span-0"}]
    results = [{"json": {"choices": [{"message": {"content": RIGHT}}]}}, {"json": {"choices": []}},
               {"status": 500, "msg": "error"}]
    assert answers_by_host(pipelines, results) == {"a": {"a/omni0": RIGHT, "a/omni1": None}, "b": {"span-0": None}}


def test_results_that_do_not_pair_with_the_pipelines_are_refused():
    with pytest.raises(AnsibleFilterError, match="one request result for each"):
        answers_by_host([{"host": "a", "pipeline_key": "a/omni0"}], [])
