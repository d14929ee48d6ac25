"""``python -m rlstack.trainer``: the GRPO trainer service.

Under ``torchrun`` rank 0 is the service (HTTP app, batches, weight sync) and every other rank
follows it without serving anything (``rlstack.trainer.engine.follow``).
"""

import os

from rlstack.common.entrypoint import run_service
from rlstack.trainer.config import TrainerSettings

if __name__ == "__main__":
    if int(os.environ.get("RANK", "0")) > 0:
        from rlstack.common.logs import configure_logging
        from rlstack.trainer.engine import follow

        settings = TrainerSettings.from_cli()
        configure_logging(settings.log_level, settings.log_format)
        follow(settings)
    else:
        run_service(TrainerSettings, "rlstack.trainer.app:build_app")
