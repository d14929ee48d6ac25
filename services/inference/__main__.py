"""``python -m rlstack.inference``: one vLLM replica with its registration sidecar."""

from rlstack.common.logs import configure_logging
from rlstack.inference.config import InferenceSettings


def main() -> None:
    settings = InferenceSettings.from_cli()
    if settings.dry_run:
        print(settings.dump_json())
        return
    configure_logging(settings.log_level, settings.log_format)
    from rlstack.common.server import serve
    from rlstack.inference.app import build_app

    serve(build_app(settings), settings)


if __name__ == "__main__":
    main()
