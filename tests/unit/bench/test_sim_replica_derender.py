"""The simulated replica's derender keeps every logprob it is given, as vLLM's does.

The proxy cuts the end-of-turn id from a generate answer before derender (for the text only) and
records the full ids; a derender that cut the logprobs too left a spliced call's record one
logprob short, and the env counted every spliced call as failed.
"""

from __future__ import annotations

from starlette.testclient import TestClient

from bench.sim_replica import IM_END, SimReplica, SimSettings


def test_derender_keeps_the_logprob_of_the_cut_end_of_turn():
    sim = SimReplica(SimSettings(), port=0, replica_id="sim-0")
    generated = {"request_id": "g1", "choices": [{"index": 0, "finish_reason": "stop", "token_ids": [100, 101],
                                                  "logprobs": {"content": [{"token_id": i, "logprob": -0.5} for i in (100, 101, IM_END)]}}]}
    with TestClient(sim.app) as client:
        answer = client.post("/v1/chat/completions/derender", json={"model": "policy", "generate_response": generated}).json()
    assert [e["logprob"] for e in answer["choices"][0]["logprobs"]["content"]] == [-0.5, -0.5, -0.5]
    assert answer["choices"][0]["token_ids"] == [100, 101]
