"""The shared shape of every ``python -m rlstack.<service>``: settings first, heavy imports after.

``--help`` and ``--dry-run`` answer before the app module (FastAPI, vLLM clients, LiteLLM) is
imported; the app factory is named as ``module:function`` for that reason.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable

from rlstack.common.logs import configure_logging
from rlstack.common.settings import ServiceSettings


def run_service(settings_cls: type[ServiceSettings], app_factory: str, before_import: Callable[[ServiceSettings], None] | None = None,
                worker_factory: str | None = None) -> None:
    """``worker_factory`` (a no-argument ``module:function``) lets ``--workers N`` run N processes on one port."""
    settings = settings_cls.from_cli()
    if settings.dry_run:
        print(settings.dump_json())
        return
    configure_logging(settings.log_level, settings.log_format)
    if before_import is not None:
        before_import(settings)
    workers = getattr(settings, "workers", 1)
    if worker_factory is not None and workers > 1:
        from rlstack.common.server import serve_workers

        serve_workers(worker_factory, settings, workers)
        return
    module, _, name = app_factory.partition(":")
    build = getattr(importlib.import_module(module), name)
    from rlstack.common.server import serve

    app = build(settings)
    serve(app, settings)
    # 1 when a supervised loop died (the supervisor stopped the process), else 0.
    supervisor = getattr(getattr(app, "state", None), "supervisor", None)
    sys.exit(supervisor.exit_code if supervisor is not None else 0)
