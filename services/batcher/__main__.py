"""``python -m rlstack.batcher``: parse settings, then import the app (so --help is instant)."""

from rlstack.batcher.config import BatcherSettings
from rlstack.common.logs import configure_logging


def main() -> None:
    settings = BatcherSettings.from_cli()
    if settings.dry_run:
        print(settings.dump_json())
        return
    configure_logging(settings.log_level, settings.log_format)
    from rlstack.batcher.app import build_app
    from rlstack.common.server import serve

    serve(build_app(settings), settings)


if __name__ == "__main__":
    main()
