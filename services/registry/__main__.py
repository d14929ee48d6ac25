"""``python -m rlstack.registry``: parse settings, then import the app (so --help is instant)."""

from rlstack.common.logs import configure_logging
from rlstack.registry.config import RegistrySettings


def main() -> None:
    settings = RegistrySettings.from_cli()
    if settings.dry_run:
        print(settings.dump_json())
        return
    configure_logging(settings.log_level, settings.log_format)
    from rlstack.common.server import serve
    from rlstack.registry.app import build_app

    serve(build_app(settings), settings)


if __name__ == "__main__":
    main()
