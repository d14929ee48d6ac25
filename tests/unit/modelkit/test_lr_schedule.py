"""The warm starts' learning-rate schedule: the shipped demos keep it constant after the warm-up;
a policy learnt by heart decays it to its last step."""

from __future__ import annotations

import pytest

from rlstack.modelkit.warm_start import WARMUP_STEPS, lr_share


def test_constant_after_the_warm_up_unless_asked_to_decay():
    assert [lr_share(s, 70, 1.0) for s in (0, WARMUP_STEPS - 1, WARMUP_STEPS, 69)] == [1 / WARMUP_STEPS, 1.0, 1.0, 1.0]
    decayed = [lr_share(s, 300, 0.1) for s in range(WARMUP_STEPS - 1, 300)]
    assert decayed[0] == decayed[1] == 1.0 and decayed[-1] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(decayed, decayed[1:], strict=False))
