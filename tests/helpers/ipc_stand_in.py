"""Stand-ins for the two GPU-only parts of the ``ipc`` sync, so its code runs on CPU machines.

- ``shared_memory_source``: instead of a CUDA IPC handle, a handle to the tensor's own memory,
  moved into CPU shared memory (torch's file-system sharing, the CPU side of the same
  ``torch.multiprocessing`` machinery), under a made-up device id per rank. Like a CUDA IPC
  handle, it opens only while the process that made it keeps the tensor alive: a trainer that
  drops a layer before the replicas have copied it fails the test.
- ``StandInIpcReplica``: an HTTP server answering the vLLM routes the ipc publisher drives. On
  ``/update_weights`` it opens the handle made for *its* device id (as vLLM's worker looks up its
  GPU's UUID), copies the tensor, and keeps it for the test to compare. It serves nothing.
"""

from __future__ import annotations

import base64
import json
import pickle
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import torch

from rlstack.trainer.sync.ipc import IpcSource


def _shared_memory_handle(tensor: torch.Tensor) -> tuple:
    manager, name, nbytes = tensor.untyped_storage()._share_filename_cpu_()  # in place: lives as long as the tensor
    return manager, name, nbytes, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), list(tensor.stride()), \
        tensor.storage_offset()


def shared_memory_source(device_id: str) -> IpcSource:
    return IpcSource(device_id, _shared_memory_handle)


def open_shared(handle: tuple) -> torch.Tensor:
    """A copy of the tensor behind ``handle`` (made by another process, which must still hold it).

    Read straight from /dev/shm rather than through torch's shm manager: a consumer connected to
    the manager keeps it running, and with it the pipes it inherited from the trainer's ranks.
    """
    _manager, name, nbytes, dtype, shape, stride, offset = handle
    raw = Path("/dev/shm", name.decode().lstrip("/")).read_bytes()
    raw = raw[len(raw) - nbytes:]  # the data follows torch's refcount header
    flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(getattr(torch, dtype))
    return flat.as_strided(shape, stride, offset).clone()


class StandInIpcReplica:
    """Stands in for a vLLM replica on one GPU (none here): takes weights by ipc handle, serves nothing."""

    def __init__(self, device_id: str, model: str = "policy") -> None:
        self.device_id = device_id
        self.model = model
        self.calls: list[str] = []
        self.updates: list[list[str]] = []
        """Names in each ``/update_weights``, in order."""
        self.received: dict[str, torch.Tensor] = {}
        self.offered: set[str] = set()
        """Every device id a handle was offered for."""
        self.paused = False
        self.version: int | None = None
        replica = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # noqa: ANN002 - quiet
                pass

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path == "/v1/models":
                    self._answer(200, {"object": "list", "data": [{"id": replica.model, "object": "model"}]})
                else:
                    self._answer(404, {"error": self.path})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else {}
                path = self.path.split("?")[0]
                replica.calls.append(path)
                try:
                    replica.handle(path, body)
                except Exception as exc:  # noqa: BLE001 - answered as vLLM would, with a 500
                    self._answer(500, {"error": f"{type(exc).__name__}: {exc}"})
                    return
                self._answer(200, {"success": True} if path == "/reset_prefix_cache" else {})  # vLLM's answers

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def handle(self, path: str, body: dict) -> None:
        if path == "/pause":
            self.paused = True
        elif path == "/resume":
            self.paused = False
        elif path == "/update_weights":
            info = body["update_info"]
            handles = pickle.loads(base64.b64decode(info["ipc_handles_pickled"]))
            for name, dtype, shape, by_device in zip(info["names"], info["dtype_names"], info["shapes"], handles, strict=True):
                self.offered.update(by_device)
                if self.device_id not in by_device:
                    raise ValueError(f"no handle for device {self.device_id}; have {sorted(by_device)}")
                tensor = open_shared(by_device[self.device_id])
                assert str(tensor.dtype).removeprefix("torch.") == dtype and list(tensor.shape) == shape
                self.received[name] = tensor
            self.updates.append(list(info["names"]))
        elif path == "/finish_weight_update":
            self.version = int(body["weight_version"])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
