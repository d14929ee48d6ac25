"""Methods vLLM mixes into every worker (``--worker-extension-cls``), called via /collective_rpc.

Kept import-light: vLLM imports this in each worker process. Full-weight reloads go through
``rlstack_reload_weights`` (vLLM's own layerwise ``reload_weights``, then the CPU GEMM handles
rebuilt: see ``cpu_gemm``); a checksum lets tests see which weights a replica holds, and the
weight version is stored beside the weights it names.

The version is also written to a file the sidecar reads (``weight_state``).
"""

from __future__ import annotations

import os

from rlstack.inference.weight_state import STATE_DIR_ENV, write_weight_state


def _register_gloo_engine() -> None:
    """Make ``--weight-transfer-config '{"backend": "gloo"}'`` resolvable in this worker."""
    try:
        from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
    except ImportError:  # imported outside vLLM (tests, the trainer's environment)
        return
    try:
        WeightTransferEngineFactory.register_engine("gloo", "rlstack.inference.gloo_engine", "GlooWeightTransferEngine")
    except ValueError:
        pass  # already registered in this process


_register_gloo_engine()


class RLStackWorkerExtension:
    def rlstack_weights_checksum(self) -> float:
        """Sum of every parameter in float64: equal weights give equal sums on every rank."""
        import torch

        model = self.model_runner.model  # type: ignore[attr-defined]
        total = torch.zeros((), dtype=torch.float64)
        for param in model.parameters():
            total += param.detach().to(torch.float64).sum().cpu()
        return float(total)

    def rlstack_reload_weights(self, weights_path: str) -> int:
        """vLLM's in-place layerwise reload from files, then every CPU GEMM handle that could
        still read the old weights rebuilt; returns how many were rebuilt (0 on GPUs)."""
        from rlstack.inference.cpu_gemm import refresh_cpu_gemm

        self.reload_weights(weights_path=weights_path)  # type: ignore[attr-defined]
        return refresh_cpu_gemm(self.model_runner.model)  # type: ignore[attr-defined]

    def rlstack_set_weight_version(self, version: int, adapter: str | None = None) -> int:
        """Remember which policy version these weights are (and, in lora mode, which adapter
        serves it): the version lives with the weights."""
        self._rlstack_weight_version = int(version)  # type: ignore[attr-defined]
        self._rlstack_adapter = adapter  # type: ignore[attr-defined]
        if os.environ.get(STATE_DIR_ENV):
            write_weight_state(os.environ[STATE_DIR_ENV], int(getattr(self, "rank", 0)), version, adapter)
        return self._rlstack_weight_version

    def rlstack_weight_state(self) -> dict:
        """The version and adapter the trainer stored, and the dtype the model computes in (the
        served-weights check's tolerance follows it)."""
        dtype = str(self.vllm_config.model_config.dtype).removeprefix("torch.")  # type: ignore[attr-defined]
        return {"version": getattr(self, "_rlstack_weight_version", None), "adapter": getattr(self, "_rlstack_adapter", None),
                "dtype": dtype}
