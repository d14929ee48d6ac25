"""Which publisher a sync mode means: the one place that knows, so the training loop only publishes.

Each mode's module is imported when chosen (broadcast pulls in torch.distributed's groups, lora
peft), and every publisher is wrapped in the served-weights check unless it is turned off.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rlstack.trainer.sync import WeightPublisher, replica_headers

if TYPE_CHECKING:
    from rlstack.common.registry_client import RegistryClient
    from rlstack.trainer.config import TrainerSettings


def _filesystem(settings: TrainerSettings, registry: RegistryClient, key: str | None) -> WeightPublisher:
    from rlstack.trainer.sync.filesystem import FilesystemPublisher

    return FilesystemPublisher(settings.sync_spec.weights_dir, registry, settings.served_model_name, replica_api_key=key)


def _broadcast(settings: TrainerSettings, registry: RegistryClient, key: str | None) -> WeightPublisher:
    from rlstack.trainer.sync.broadcast import BroadcastPublisher

    return BroadcastPublisher(registry, settings.served_model_name, trainer_host=settings.sync_spec.host, replica_api_key=key)


def _lora(settings: TrainerSettings, registry: RegistryClient, key: str | None) -> WeightPublisher:
    from rlstack.trainer.sync.lora import LoraPublisher

    return LoraPublisher(settings.sync_spec.weights_dir, registry, settings.served_model_name, replica_api_key=key)


def _ipc(settings: TrainerSettings, registry: RegistryClient, key: str | None) -> WeightPublisher:
    from rlstack.trainer.sync.ipc import IpcPublisher

    return IpcPublisher(registry, settings.served_model_name, replica_api_key=key)


PUBLISHERS: dict[str, Callable[[TrainerSettings, RegistryClient, str | None], WeightPublisher]] = {
    "filesystem": _filesystem, "broadcast": _broadcast, "lora": _lora, "ipc": _ipc,
}


def build_publisher(settings: TrainerSettings, registry: RegistryClient | None = None) -> WeightPublisher | None:
    """The publisher of ``settings.sync.mode`` (None for ``none``), checked unless ``sync.verify`` is off.
    ``registry``: the trainer's one registry client (made here when not given)."""
    if settings.sync.mode == "none":
        return None
    if settings.registry_url is None:
        raise ValueError("registry_url is required to sync weights (or set sync_mode=none)")
    if registry is None:
        from rlstack.common.registry_client import RegistryClient

        registry = RegistryClient(str(settings.registry_url))
    key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
    publisher = PUBLISHERS[settings.sync.mode](settings, registry, key)
    if not settings.sync.verify:
        return publisher
    from rlstack.trainer.sync.verify import ServedWeightsCheck, VerifiedPublisher

    return VerifiedPublisher(publisher, ServedWeightsCheck(registry, settings.served_model_name, replica_headers(key), settings.sync.verify_tolerance),
                             settings.sync.verify_wait_seconds)
