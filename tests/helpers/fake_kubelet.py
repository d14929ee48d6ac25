"""FakeKubelet: runs the sandbox pods a FakeKubeApiServer holds, on this host, under bubblewrap.

No kubelet or container runtime can run here. This fake plays one for trial pods: for each new
pod it runs the init containers in order and then the main container, each as a bubblewrap
sandbox whose mounts are the pod's ``volumeMounts`` (the PVC is a host directory, ``subPath``
a directory below it, each ``emptyDir`` a fresh directory made 0777 as the kubelet makes it),
with the container's ``command``, ``env`` and ``workingDir``; the pod is ``Running`` from its main
container's start (``Pending`` while its init containers run). A container whose image is in
this host's podman store runs in that image, as a node would run it: its layers under an overlay
with a writable layer of the container's own (mount points made there, as a runtime makes them),
its ENV and WORKDIR, PID 1 of its own PID namespace (``--as-pid-1``); an ``image`` volume is that
image's one layer, read-only. Any other image (``rlstack:test``) is the host's tools. It reports
phases through the API server as a kubelet would, and kills what is running when the pod is
deleted. The code under test is real; only the kubelet is a fake.

Each container runs as the pod's own identity, as a node would run it: ``runAsUser``,
``runAsGroup`` (0 when unset, the usual image default) and ``fsGroup``/``supplementalGroups``
as extra groups, through ``setpriv`` inside the sandbox, so a directory the env server made
that the pod's user may not write fails here as it fails on a node. ``fsGroup`` is applied to
emptyDirs and, like kind's local-path and NFS-style volumes, never to the claim. A read-only
root filesystem leaves no writable /tmp unless a volume is mounted there. Changing identity
needs root (CI runs as root); as another user, every container runs as that user and
``runs_as_pod_identity`` is False. In an image, a non-root container's bubblewrap runs as that
user in a user namespace of its own (uid mapped to itself), so the image's root-owned files show
as ``nobody`` there; permissions are decided as on a node. A root container keeps exactly the
capabilities its ``securityContext`` adds.
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

from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.engine import Engine, ImageInfo, ToolError
from rlstack.episodes.sandboxes.bwrap import Bind
from rlstack.episodes.sandboxes.layers import TrialLayers, launcher_argv

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
        self.images: dict[str, str] = {}
        """The image each container ran in (``<pod>/<container>`` -> image id), or ``host``."""
        self._inspected: dict[str, ImageInfo | None] = {}
        self._seen: set[str] = set()
        self._pods: list[threading.Thread] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="fake-kubelet", daemon=True)

    def __enter__(self) -> FakeKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        """As a node going away: its containers are killed and their scratch removed (pods still
        running here, e.g. a warm pool's, would otherwise poll on and keep their copies on disk)."""
        self._stop.set()
        self._thread.join(30)
        for pod in self._pods:
            pod.join(30)

    def _loop(self) -> None:
        while not self._stop.is_set():
            for (ns, name), pod in list(self.api.pods.items()):
                if ns == self.namespace and name not in self._seen:
                    self._seen.add(name)
                    thread = threading.Thread(target=self._run_pod, args=(name, pod), daemon=True)
                    self._pods.append(thread)
                    thread.start()
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
            elif "image" in volume:
                volumes[volume["name"]] = self._image_volume(volume["image"]["reference"])
            else:
                path = scratch / volume["name"]
                path.mkdir()
                os.chmod(path, 0o777)
                if security.get("fsGroup") is not None and self.runs_as_pod_identity:
                    os.chown(path, -1, security["fsGroup"])
                    os.chmod(path, 0o2777)
                volumes[volume["name"]] = path
        try:
            for container in [*spec.get("initContainers", []), *spec["containers"]]:
                if container is spec["containers"][0]:  # Pending while init containers run, as on a node
                    self.api.set_status(self.namespace, name, "Running")
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

    def _inspect(self, ref: str) -> ImageInfo | None:
        """The image from podman's store, with its layer directories; None: not there (the host's tools)."""
        if ref not in self._inspected:
            try:
                info = Engine(ImageSettings()).inspect(ref)
                self._inspected[ref] = info if info.layers else None
            except (ToolError, OSError):
                self._inspected[ref] = None
        return self._inspected[ref]

    def _image_volume(self, ref: str) -> Path:
        info = self._inspect(ref)
        if info is None or len(info.layers) != 1:
            raise RuntimeError(f"FakeKubelet: image volume {ref} must be a one-layer image in podman's store")
        return info.layers[0]

    def _run_container(self, pod: str, pod_security: dict, container: dict, volumes: dict[str, Path]) -> int | None:
        binds = []
        for mount in container.get("volumeMounts", []):
            source = volumes[mount["name"]] / mount.get("subPath", "")
            source.mkdir(parents=True, exist_ok=True)  # as the kubelet does for a missing subPath (as root)
            binds.append(Bind(source, mount["mountPath"], writable=not mount.get("readOnly", False)))
        identity = self._identity(pod_security, container) if self.runs_as_pod_identity else None
        if identity is not None:
            self.identities[f"{pod}/{container['name']}"] = identity
        security = container.get("securityContext", {})
        read_only_root = bool(security.get("readOnlyRootFilesystem"))
        env = {"PATH": HOST_PATH, **{e["name"]: e["value"] for e in container.get("env", [])}}
        image = self._inspect(container["image"])
        layers = None
        if image is None:
            self.images[f"{pod}/{container['name']}"] = "host"
            argv = container_argv(binds, hide=[self.claim_root], command=container["command"],
                                  chdir=container.get("workingDir", "/"), identity=identity, writable_tmp=not read_only_root)
        else:
            self.images[f"{pod}/{container['name']}"] = image.id
            layers = TrialLayers.make(Path(tempfile.gettempdir()) / "fake-kubelet-layers", f"{pod}-{container['name']}-")
            os.chmod(layers.root, 0o755)  # a non-root container's bubblewrap must reach its root there
            uid = identity[0] if identity is not None else os.geteuid()
            env = {**image.config.env, "HOME": "/root" if uid == 0 else "/", **{e["name"]: e["value"] for e in container.get("env", [])}}
            env.setdefault("PATH", HOST_PATH)
            argv = launcher_argv(unshare=shutil.which("unshare"), mount=shutil.which("mount"), lowers=image.layers, layers=layers,
                                 sandbox=image_container_argv(layers, binds, command=container["command"],
                                                              chdir=container.get("workingDir") or image.config.working_dir,
                                                              identity=identity, read_only_root=read_only_root,
                                                              capabilities=security.get("capabilities", {}).get("add", [])))
        try:
            return self._exec(pod, container, argv, env)
        finally:
            if layers is not None:
                layers.remove()

    def _exec(self, pod: str, container: dict, argv: list[str], env: dict[str, str]) -> int | None:
        with tempfile.TemporaryFile() as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            while proc.poll() is None:
                if self._gone(pod) or self._stop.is_set():
                    proc.kill()
                    proc.wait()
                    return None
                time.sleep(0.05)
            out.seek(0)
            self.output[f"{pod}/{container['name']}"] = out.read().decode(errors="replace")[-4000:]
        return None if self._gone(pod) or self._stop.is_set() else proc.returncode


def image_container_argv(layers: TrialLayers, binds: list[Bind], *, command: list[str], chdir: str,
                         identity: tuple[int, int, tuple[int, ...]] | None, read_only_root: bool,
                         capabilities: list[str]) -> list[str]:
    """bubblewrap rooted at the container's overlay (``layers.merged``, mounted by the launcher).

    Mount points and the working directory are made in the container's writable layer first, as a
    runtime makes them as root: a non-root container could not make them in a root-owned tree."""
    for path in ["/dev", "/proc", *[b.target for b in binds], chdir]:
        (layers.upper / path.lstrip("/")).mkdir(parents=True, exist_ok=True)
    argv = ["bwrap", "--ro-bind" if read_only_root else "--bind", str(layers.merged), "/", "--dev", "/dev", "--proc", "/proc"]
    for bind in binds:
        argv += ["--bind" if bind.writable else "--ro-bind", str(bind.source), bind.target]
    argv += ["--die-with-parent", "--unshare-pid", "--as-pid-1", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
             "--chdir", chdir]
    if identity is None or identity[0] == 0:
        argv += ["--cap-drop", "ALL", *[arg for cap in capabilities for arg in ("--cap-add", f"CAP_{cap}")]]
        return [*argv, "--", *command]
    uid, gid, groups = identity
    become = ["setpriv", f"--reuid={uid}", f"--regid={gid}",
              f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups", "--inh-caps=-all", "--"]
    return [*become, *argv, "--", *command]


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
