"""The served-weights check's bounds, apart from the check (``sync/verify.py``) so that reading the
trainer's settings (``--help``, ``--dry-run``, the chart's tests) imports no HTTP client."""

from __future__ import annotations

from pydantic import BaseModel


class Tolerance(BaseModel):
    """Largest gaps between the trainer's and a replica's logprobs (nats per token) that are numerics, not a bug."""

    mean_abs: float
    max_abs: float


TOLERANCES: dict[str, Tolerance] = {
    # Two float32 implementations of the same maths (transformers' eager kernels, vLLM's CPU or
    # CUDA kernels) agree to ~1e-5 per token; a corrupt reload is off by nats.
    "float32": Tolerance(mean_abs=0.01, max_abs=0.1),
    # bf16 serving against a float32 trainer: trainers of this kind (verl, prime-rl) see a mean
    # |Δlogprob| of about 0.01-0.05 and single tokens up to ~1 nat on sampled text; a probe of
    # random ids sits in the low-probability tail, so the mean bound is 0.15. A garbage replica
    # is off by > 0.5 on average.
    "bfloat16": Tolerance(mean_abs=0.15, max_abs=2.0),
    "float16": Tolerance(mean_abs=0.08, max_abs=1.0),
}
