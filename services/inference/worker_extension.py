"""Methods vLLM mixes into every worker (``--worker-extension-cls``), called via /collective_rpc.

Kept import-light: vLLM imports this in each worker process. Weight-sync methods arrive with
the training issue; for now a checksum lets tests see which weights a replica holds.
"""

from __future__ import annotations


class RLStackWorkerExtension:
    def rlstack_weights_checksum(self) -> float:
        """Sum of every parameter in float64: equal weights give equal sums on every rank."""
        import torch

        model = self.model_runner.model  # type: ignore[attr-defined]
        total = torch.zeros((), dtype=torch.float64)
        for param in model.parameters():
            total += param.detach().to(torch.float64).sum().cpu()
        return float(total)

    def rlstack_ping(self) -> str:
        return "pong"
