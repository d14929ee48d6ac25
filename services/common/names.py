"""The one shape of the ids that become file names, URL path segments and log fields: runs,
trials, replicas, trajectory writers. Kubernetes label values are stricter (see ``kube``)."""

POLICY_NAME = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
"""A policy's name (its replicas' served name): a Kubernetes label value, as the chart labels each
policy's Deployments with it."""
SERVED_MODEL_NAME = "policy"
"""The name vLLM serves the policy under unless told otherwise (``--served-model-name`` everywhere):
replicas register it, the proxy maps agents' model names onto it, envs and the trainer filter on it."""


def adapter_name(served_model_name: str, version: int) -> str:
    """The name a replica serves weight version ``version``'s LoRA adapter under (set by the trainer's
    sync, mapped onto by the replica and the proxy)."""
    return f"{served_model_name}-lora-v{version}"


def adapter_version(name: str) -> int | None:
    """The version an ``adapter_name`` carries; None for any other model name."""
    head, sep, tail = name.rpartition("-lora-v")
    return int(tail) if sep and head and tail.isdecimal() else None


ID_BODY = r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}"
ID_PATTERN = rf"^{ID_BODY}$"
