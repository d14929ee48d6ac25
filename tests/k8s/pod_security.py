"""The Pod Security Standards' ``restricted`` profile (Kubernetes 1.31 and later), as a function.

No API server runs here to enforce it, so tests check pod specs against the profile's published
rules (baseline and restricted controls) with this: every rule that can apply to a pod spec.
"""

from __future__ import annotations

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def restricted_violations(spec: dict) -> list[str]:
    """What in this pod spec the ``restricted`` profile forbids; [] when it passes."""
    bad: list[str] = []
    pod_sc = spec.get("securityContext") or {}
    containers = [*spec.get("initContainers", []), *spec.get("containers", []), *spec.get("ephemeralContainers", [])]
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            bad.append(f"{field}: true")
    for v in spec.get("volumes", []):
        kinds = set(v) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            bad.append(f"volume {v['name']}: {sorted(kinds - RESTRICTED_VOLUMES)} is not an allowed volume type")
    for s in pod_sc.get("sysctls", []):
        if s["name"] not in SAFE_SYSCTLS:
            bad.append(f"sysctl {s['name']}")
    if (pod_sc.get("windowsOptions") or {}).get("hostProcess"):
        bad.append("pod windowsOptions.hostProcess")
    if (pod_sc.get("seccompProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
        bad.append("pod seccompProfile must be RuntimeDefault or Localhost")
    if pod_sc.get("runAsUser") == 0:
        bad.append("pod runAsUser: 0")
    for where, sc in [("pod", pod_sc), *((c["name"], c.get("securityContext") or {}) for c in containers)]:
        se = sc.get("seLinuxOptions") or {}
        if se.get("type") not in SELINUX_TYPES or se.get("user") or se.get("role"):
            bad.append(f"{where}: seLinuxOptions")
        if (sc.get("appArmorProfile") or {}).get("type") not in (None, "RuntimeDefault", "Localhost"):
            bad.append(f"{where}: appArmorProfile")
    for c in containers:
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            bad.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{name}: allowPrivilegeEscalation must be false")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            bad.append(f"{name}: capabilities must drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            bad.append(f"{name}: capabilities add {sorted(set(caps['add']) - {'NET_BIND_SERVICE'})}")
        if sc.get("procMount") not in (None, "Default"):
            bad.append(f"{name}: procMount")
        if (sc.get("windowsOptions") or {}).get("hostProcess"):
            bad.append(f"{name}: windowsOptions.hostProcess")
        if any(p.get("hostPort") for p in c.get("ports", [])):
            bad.append(f"{name}: hostPort")
        if sc.get("runAsUser") == 0:
            bad.append(f"{name}: runAsUser: 0")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            bad.append(f"{name}: runAsNonRoot must be true (pod or container)")
        profile = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if profile not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{name}: seccompProfile must be RuntimeDefault or Localhost (pod or container)")
    return bad
