"""FakeKubelet: runs the sandbox pods a FakeKubeApiServer holds, on this host, under bubblewrap.

No kubelet or container runtime can run here. This fake plays one for trial pods: for each new
pod it runs the init containers in order and then the main container, each as a bubblewrap
sandbox whose mounts are the pod's ``volumeMounts`` (the PVC is a host directory, ``subPath``
a directory below it, each ``emptyDir`` a fresh directory made 0777 as the kubelet makes it),
with the container's ``command``, ``env`` and ``workingDir``. Images are ignored (the host's
tools stand in for the image). It reports phases through the API server as a kubelet would,
and kills what is running when the pod is deleted. The code under test is real; only the
kubelet is a fake.

Each container runs as the pod's own identity, as a node would run it: ``runAsUser``,
``runAsGroup`` (0 when unset, the usual image default) and ``fsGroup``/``supplementalGroups``
as extra groups, through ``setpriv`` inside the sandbox, so a directory the env server made
that the pod's user may not write fails here as it fails on a node. ``fsGroup`` is applied to
emptyDirs and, like kind's local-path and NFS-style volumes, never to the claim. A read-only
root filesystem leaves no writable /tmp unless a volume is mounted there. Changing identity
needs root (CI runs as root); as another user, every container runs as that user and
``runs_as_pod_identity`` is False.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from rlstack.episodes.sandboxes.bwrap import Bind

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PRIVATE_TOPS = frozenset({"root", "home", "proc", "dev", "tmp", "run"})
"""Never bound from the host: a node's container does not see the node's homes or runtime state."""


def runtime_paths() -> list[Path]:
    """What "the image" must hold: this Python (its venv and the interpreter behind it) and rlstack."""
    import rlstack

    return [Path(p).resolve() for p in {sys.prefix, sys.base_prefix}] + [Path(rlstack.__file__).resolve().parents[1]]


class FakeKubelet:
    def __init__(self, api, claim_root: Path, namespace: str) -> None:  # noqa: ANN001 - FakeKubeApiServer
        self.api, self.claim_root, self.namespace = api, claim_root, namespace
        self.started: list[str] = []
        self.identities: dict[str, tuple[int, int, tuple[int, ...]]] = {}
        """(uid, gid, extra groups) each container ran as, by ``<pod>/<container>``."""
        self.runs_as_pod_identity = os.geteuid() == 0
        self.output: dict[str, str] = {}
        """What each container printed (stdout and stderr), by ``<pod>/<container>``: its log."""
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)

    def __enter__(self) -> FakeKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for (ns, name), pod in list(self.api.pods.items()):
                if ns == self.namespace and name not in self._seen:
                    self._seen.add(name)
                    threading.Thread(target=self._run_pod, args=(name, pod), daemon=True).start()
            time.sleep(0.05)

    def _gone(self, name: str) -> bool:
        return (self.namespace, name) not in self.api.pods

    def _run_pod(self, name: str, pod: dict) -> None:
        self.started.append(name)
        spec = pod["spec"]
        security = spec.get("securityContext", {})
        scratch = Path(tempfile.mkdtemp(prefix=f"kubelet-{name}-"))
        os.chmod(scratch, 0o755)
        volumes = {}
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                volumes[volume["name"]] = self.claim_root  # hostPath-like: fsGroup is not applied
            else:
                path = scratch / volume["name"]
                path.mkdir()
                os.chmod(path, 0o777)
                if security.get("fsGroup") is not None and self.runs_as_pod_identity:
                    os.chown(path, -1, security["fsGroup"])
                    os.chmod(path, 0o2777)
                volumes[volume["name"]] = path
        try:
            self.api.set_status(self.namespace, name, "Running")
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                code = self._run_container(name, security, container, volumes)
                if code is None:
                    return  # deleted under us
                if code != 0:
                    self.api.set_status(self.namespace, name, "Failed", exit_code=code)
                    return
            self.api.set_status(self.namespace, name, "Succeeded", exit_code=0)
        except KeyError:
            return  # the pod was deleted while we reported on it
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _identity(self, pod_security: dict, container: dict) -> tuple[int, int, tuple[int, ...]] | None:
        own = {**pod_security, **container.get("securityContext", {})}
        if own.get("runAsUser") is None:
            return None
        groups = [g for g in [pod_security.get("fsGroup"), *pod_security.get("supplementalGroups", [])] if g is not None]
        return int(own["runAsUser"]), int(own.get("runAsGroup") or 0), tuple(groups)

    def _run_container(self, pod: str, pod_security: dict, container: dict, volumes: dict[str, Path]) -> int | None:
        binds = []
        for mount in container.get("volumeMounts", []):
            source = volumes[mount["name"]] / mount.get("subPath", "")
            source.mkdir(parents=True, exist_ok=True)  # as the kubelet does for a missing subPath (as root)
            binds.append(Bind(source, mount["mountPath"], writable=not mount.get("readOnly", False)))
        identity = self._identity(pod_security, container) if self.runs_as_pod_identity else None
        if identity is not None:
            self.identities[f"{pod}/{container['name']}"] = identity
        read_only_root = bool(container.get("securityContext", {}).get("readOnlyRootFilesystem"))
        argv = container_argv(binds, hide=[self.claim_root], command=container["command"],
                              chdir=container.get("workingDir", "/"), identity=identity, writable_tmp=not read_only_root)
        env = {"PATH": HOST_PATH, **{e["name"]: e["value"] for e in container.get("env", [])}}
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            while proc.poll() is None:
                if self._gone(pod):
                    proc.kill()
                    proc.wait()
                    return None
                time.sleep(0.05)
            out.seek(0)
            self.output[f"{pod}/{container['name']}"] = out.read().decode(errors="replace")[-4000:]
        return None if self._gone(pod) else proc.returncode


def container_argv(binds: list[Bind], *, hide: list[Path], command: list[str], chdir: str,
                   identity: tuple[int, int, tuple[int, ...]] | None, writable_tmp: bool) -> list[str]:
    """bwrap as root builds the container's mounts; ``setpriv`` then becomes the pod's user."""
    taken = {b.target.strip("/").split("/")[0] for b in binds} | PRIVATE_TOPS
    argv = ["bwrap"]
    for name in sorted(os.listdir("/")):
        if name in taken:
            continue
        path = f"/{name}"
        argv += ["--symlink", os.readlink(path), path] if os.path.islink(path) else ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--tmpfs", "/tmp"] if writable_tmp else ["--perms", "0755", "--dir", "/tmp"]
    for bind in binds:  # mount points' parents 0755, as a container runtime makes them (bwrap's own are 0700)
        parts = Path(bind.target).parts
        for depth in range(2, len(parts)):
            argv += ["--perms", "0755", "--dir", str(Path(*parts[:depth]))]
        argv += ["--bind" if bind.writable else "--ro-bind", str(bind.source), bind.target]
    for path in runtime_paths():  # "the image" holds Python and rlstack, also where the host keeps them private
        if path.parts[1] in taken:
            for depth in range(2, len(path.parts)):
                argv += ["--perms", "0755", "--dir", str(Path(*path.parts[:depth]))]
        argv += ["--ro-bind", str(path), str(path)]
    for path in hide:
        if path.is_absolute() and path != Path("/") and path.exists():
            argv += ["--tmpfs", str(path)]
    argv += ["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
             "--chdir", chdir, "--cap-drop", "ALL"]
    if identity is None:
        return [*argv, "--", *command]
    uid, gid, groups = identity
    become = ["setpriv", f"--reuid={uid}", f"--regid={gid}",
              f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups", "--inh-caps=-all"]
    return [*argv, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", *become, "--", *command]
