"""Write charts/rlstack/values.schema.json: the types, ranges and choices of every chart value.

Helm checks values against this schema on install, upgrade, template and lint, so a bad value
fails with the value's path and the rule it broke instead of as a broken pod later. Unknown keys
are refused too (a misspelt value would otherwise do nothing). Run after changing values.yaml;
tests/k8s/test_values_schema.py fails when the committed file differs from this output.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from rlstack.common.model_families import FAMILIES
from rlstack.common.names import POLICY_NAME

SCHEMA = Path(__file__).resolve().parents[1] / "charts" / "rlstack" / "values.schema.json"

J = dict[str, Any]


def obj(props: J, required: list[str] | None = None, *, extra: bool = False, desc: str = "") -> J:
    out: J = {"type": "object", "properties": props, "additionalProperties": extra}
    if required:
        out["required"] = required
    if desc:
        out["description"] = desc
    return out


def s(desc: str = "", **kw: Any) -> J:
    return {"type": "string", **({"description": desc} if desc else {}), **kw}


def i(lo: int | None = None, hi: int | None = None, desc: str = "") -> J:
    out: J = {"type": "integer"}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    if desc:
        out["description"] = desc
    return out


def enum(*choices: str, desc: str = "") -> J:
    return {"type": "string", "enum": list(choices), **({"description": desc} if desc else {})}


BOOL: J = {"type": "boolean"}
# `helm --set x=0.2` passes a string: decimals are numbers or decimal strings.
POSITIVE: J = {"type": ["number", "string"], "exclusiveMinimum": 0, "pattern": "^[0-9]*[.]?[0-9]+$"}
NON_NEGATIVE: J = {"type": ["number", "string"], "minimum": 0, "pattern": "^[0-9]*[.]?[0-9]+$"}
MAP: J = {"type": "object"}
LIST: J = {"type": "array"}
PORT = i(1, 65535)
STR_MAP: J = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]}}
QUANTITY: J = {"type": ["string", "integer", "number"]}
RESOURCES = obj({"requests": {"type": "object", "additionalProperties": QUANTITY},
                 "limits": {"type": "object", "additionalProperties": QUANTITY},
                 "claims": LIST})
ENV = {"type": "object", "additionalProperties": {"type": ["string", "number", "boolean"]},
       "description": "extra RLSTACK_* settings, passed as env vars unchanged"}
IMAGE = obj({"repository": s(minLength=1), "tag": {"type": ["string", "number"]},
             "pullPolicy": enum("Always", "IfNotPresent", "Never")}, ["repository"])

# The scheduling and extension knobs every pod has (podDefaults and each component).
POD_KNOBS: J = {
    "podLabels": STR_MAP,
    "podAnnotations": STR_MAP,
    "priorityClassName": s(),
    "runtimeClassName": s(),
    "nodeSelector": STR_MAP,
    "tolerations": LIST,
    "affinity": MAP,
    "topologySpreadConstraints": LIST,
    "extraEnv": {"type": "array", "items": obj({"name": s(minLength=1), "value": s(), "valueFrom": MAP}, ["name"])},
    "extraVolumes": {"type": "array", "items": {"type": "object", "required": ["name"]}},
    "extraVolumeMounts": {"type": "array", "items": {"type": "object", "required": ["name", "mountPath"]}},
}


def component(props: J, required: list[str] | None = None) -> J:
    return obj({"port": PORT, "env": ENV, "resources": RESOURCES, **POD_KNOBS, **props}, ["port", *(required or [])])


PDB = obj({"enabled": BOOL, "maxUnavailable": {"type": ["integer", "string"]}})
AUTOSCALE_COMMON: J = {"enabled": BOOL, "minReplicas": i(1), "maxReplicas": i(1)}

MODEL = obj({
    "path": s("model directory on the shared volume", pattern="^/"),
    "servedName": s(minLength=1),
    "family": enum("", *FAMILIES),
    "source": obj({
        "type": enum("hub", "demo", "hostPath", "claim", "none"),
        "hub": obj({"id": s(), "revision": s(minLength=1), "tokenSecret": s(), "tokenSecretKey": s(minLength=1)}),
        "hostPath": s(),
        "claim": obj({"name": s(), "subPath": s()}),
    }, ["type"]),
    "job": obj({"backoffLimit": i(0), "nodeSelector": STR_MAP, "tolerations": LIST,
                "priorityClassName": s(), "resources": RESOURCES}),
}, ["path", "servedName", "source"])

INFERENCE = component({
    "replicas": i(0), "vllmPort": PORT,
    "device": enum("cuda", "cpu"),
    "tensorParallelSize": i(1, 64), "pipelineParallelSize": i(1, 64),
    "shmSize": QUANTITY,
    "extraVllmArgs": {"type": "array", "items": {"type": "string"}},
    "startupProbe": obj({"periodSeconds": i(1), "failureThreshold": i(1)}, ["periodSeconds", "failureThreshold"]),
    "rollingUpdate": obj({"maxSurge": {"type": ["integer", "string"]}, "maxUnavailable": {"type": ["integer", "string"]}}),
    "progressDeadlineMarginSeconds": i(0),
    "pdb": PDB,
    "autoscaling": obj({
        **AUTOSCALE_COMMON, "type": enum("keda", "hpa"), "waitingPerReplica": POSITIVE,
        "keda": obj({"serverAddress": s(), "pollingInterval": i(1), "cooldownPeriod": i(0)}),
        "hpa": obj({"metricName": s(minLength=1)}),
    }),
})

TRAINER = component({
    "workload": enum("Job", "Deployment", desc="Job frees the GPU when the run ends"),
    "runId": s("the training run: a new value starts a new run", pattern="^([a-z0-9]([-a-z0-9]{0,18}[a-z0-9])?)?$"),
    "kueue": obj({"queueName": s("Kueue LocalQueue of the trainer Job")}),
    "backoffLimit": i(0), "gpus": i(0),
    "nodes": i(1, desc="trainer pods, one per node; more than 1: an Indexed Job (workload Job, RWX storage)"),
    "shmSize": QUANTITY,
    "packTokens": {"type": ["integer", "null"], "minimum": 16,
                   "description": "tokens per packed row (RLSTACK_TRAINER_PACKING__ROW_TOKENS); null: padded micro-batches"},
    "sharePrefix": {"type": ["integer", "null"], "minimum": 1,
                    "description": "least shared leading tokens held once per packed row (RLSTACK_TRAINER_PACKING__SHARE_PREFIX); null: off"},
    "learningRate": {"type": ["number", "null"], "exclusiveMinimum": 0, "maximum": 1,
                     "description": "RLSTACK_TRAINER_OPTIMISATION__LR; null: the trainer's default"},
    "batchSize": {"type": ["integer", "null"], "minimum": 1,
                  "description": "sequences per optimizer step (RLSTACK_TRAINER_BATCH_SIZE); null: the trainer's default"},
    "evalEvery": {"type": ["integer", "null"], "minimum": 1,
                  "description": "also evaluate every this many steps (RLSTACK_TRAINER_EVALUATION__EVERY); null: before the first and after the last only"},
    "wandb": obj({"project": s(), "apiKeySecret": s(), "apiKeySecretKey": s(minLength=1)}),
})


def optional(schema: J, *release_owned: str) -> J:
    """``schema`` with nothing required at any depth, less the ``release_owned`` properties: a policy's
    block is laid over the top-level one, which has the rest."""
    out = {k: optional(v) if isinstance(v, dict) else v for k, v in schema.items() if k != "required"}
    if "properties" in out:
        out["properties"] = {k: optional(v) for k, v in schema["properties"].items() if k not in release_owned}
    return out


NAMES = {"type": "array", "uniqueItems": True, "items": s(minLength=1)}
POLICY = obj({
    "name": s("the policy's served name (a label value)", pattern=POLICY_NAME),
    "servedNames": {**NAMES, "description": "model names agents ask for that it answers: exact, or a prefix ending in *"},
    "responsesNames": {**NAMES, "description": "names it answers on the Responses API only"},
    "model": optional(MODEL, "servedName"),
    "inference": optional(INFERENCE, "port", "vllmPort"),
    "trainer": optional(TRAINER, "port", "runId"),
}, ["name"], desc="a policy's own replicas and trainer: its blocks over the top-level ones (not the ports, "
                  "served name or run id, which are the release's)")


def schema() -> J:
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "rlstack chart values",
        **obj({
            "nameOverride": s(), "fullnameOverride": s(),
            "imageRegistry": s("prefix for every image repository"),
            "images": obj({"trainer": IMAGE, "proxy": IMAGE, "vllm": IMAGE, "agentBundle": IMAGE}, ["trainer", "proxy", "vllm"]),
            "imagePullSecrets": {"type": "array", "items": obj({"name": s(minLength=1)}, ["name"])},
            "auth": obj({"create": BOOL, "existingSecret": s(), "serviceTokenKey": s(minLength=1),
                         "trialKeySecretKey": s(minLength=1)}),
            "model": MODEL,
            "gpuMemoryGiB": POSITIVE,
            "sharedStorage": obj({"existingClaim": s(), "storageClass": s(), "size": QUANTITY,
                                  "accessMode": enum("ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"),
                                  "mountPath": s(pattern="^/")}),
            "podDefaults": obj(POD_KNOBS),
            "podSecurityContext": MAP,
            "containerSecurityContext": MAP,
            "registry": component({"replicas": i(0, 1, "the routing table lives in memory: at most one"), "watchPods": BOOL}),
            "batcher": component({"replicas": i(0, 1, "one writer owns the write-ahead log: at most one")}),
            "proxy": component({
                "replicas": i(0), "pdb": PDB, "workers": i(1, 64),
                "sessionAffinity": enum("ClientIP", "None", desc="ClientIP: a trial's calls stay on the pod holding its threads"),
                "autoscaling": obj({**AUTOSCALE_COMMON, "targetCPUUtilizationPercentage": i(1, 100)}),
            }),
            "inference": INFERENCE,
            "trainer": TRAINER,
            "policies": {"type": "array", "items": POLICY,
                         "description": "several policies in one run; empty: one, from model, inference and trainer"},
            "envs": {"type": "array", "minItems": 0, "items": component({
                "name": s(pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", maxLength=40), "replicas": i(0),
                "autoscaling": obj({**AUTOSCALE_COMMON, "targetQueueSequences": i(1), "sequencesPerPod": i(1),
                                    "keda": obj({"serverAddress": s(), "pollingInterval": i(1), "cooldownPeriod": i(0)})}),
            }, ["name"])},
            "rollouts": obj({"groupSize": {"type": ["integer", "null"], "minimum": 1, "maximum": 256},
                             "maxStaleness": {"type": ["integer", "null"], "minimum": 0}}),
            "sandboxes": obj({
                "environment": enum("image", "host", desc="image: each trial pod in its task's image; host: all in sandboxes.image"),
                "image": enum("trainer", "proxy", "vllm"),
                "imageLock": s("path of the image lock file inside the env servers; empty: the dataset's"),
                "bundleSource": enum("copy", "volume"),
                "imagePullPolicy": enum("Always", "IfNotPresent", "Never"),
                "prepull": obj({"enabled": BOOL, "images": {"type": "array", "items": s(minLength=1)},
                                "nodeSelector": STR_MAP}),
                "podSecurity": enum("restricted", "baseline", desc="baseline admits task images that run as root"),
                "warmPool": obj({"maxTotal": i(0, desc="warm pods at most over every task image; 0: none"),
                                 "maxPerImage": i(1), "idleSeconds": {"type": "integer", "minimum": 61}}),
                "serviceAccount": obj({"create": BOOL, "name": s()}),
                "reaper": obj({"enabled": BOOL, "ttlSeconds": POSITIVE,
                               "graceSeconds": NON_NEGATIVE}),
                "pod": obj({"runtimeClassName": s(), "readOnlyRootFilesystem": BOOL,
                            "ephemeralStorage": s(), "emptyDirSizeLimit": s(), "cpuRequest": QUANTITY,
                            "memoryRequest": QUANTITY}),
                "namespace": obj({
                    "name": s("the sandboxes' own namespace (Pod Security restricted); empty: the release's",
                              pattern="^([a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)?$"),
                    "create": BOOL,
                    "claim": obj({"existingClaim": s(), "volumeSource": MAP,
                                  "mountOptions": {"type": "array", "items": {"type": "string"}},
                                  "trialsSubPath": s(minLength=1)}),
                }),
            }),
            "networkPolicies": obj({"enabled": BOOL, "metricsNamespaceSelector": MAP, "scrapeVllmMetrics": BOOL,
                                    "dnsPeers": {"type": "array", "minItems": 1, "items": MAP}}),
            "dashboards": obj({"enabled": BOOL, "label": s(minLength=1), "labelValue": s()}),
            "prometheusRule": obj({"enabled": BOOL, "mismatchKlThreshold": POSITIVE,
                                   "for": s(pattern="^[0-9]+[smhd]$"), "stallFor": s(pattern="^[0-9]+[smhd]$"),
                                   "labels": STR_MAP}),
            "serviceMonitor": obj({"enabled": BOOL, "interval": s(pattern="^[0-9]+[smh]$"), "labels": STR_MAP}),
            "helmTest": obj({"enabled": BOOL}),
        }, ["images", "auth", "model", "sharedStorage", "inference", "trainer"], extra=False),
    }


def render() -> str:
    return json.dumps(schema(), indent=2) + "\n"


def main() -> int:
    if "--check" in sys.argv:
        return 0 if SCHEMA.read_text() == render() else 1
    SCHEMA.write_text(render())
    print(f"wrote {SCHEMA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
