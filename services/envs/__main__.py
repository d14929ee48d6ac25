"""``python -m rlstack.envs``: one environment server."""

from rlstack.common.logs import configure_logging
from rlstack.envs.config import EnvSettings


def main() -> None:
    settings = EnvSettings.from_cli()
    if settings.dry_run:
        print(settings.dump_json())
        return
    configure_logging(settings.log_level, settings.log_format)
    from rlstack.common.server import serve
    from rlstack.envs.app import build_app

    serve(build_app(settings), settings)


if __name__ == "__main__":
    main()
