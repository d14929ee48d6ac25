"""FROM lines rewritten through the base map: pinned refs, stages, flags; everything else as written."""

from __future__ import annotations

from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.dockerfile import has_unresolved_base, rewrite_bases

PIN = "sha256:" + "ab" * 32
SETTINGS = ImageSettings(base_map={"debian:bookworm-slim": "localhost/debian:bookworm-slim",
                                   f"python:3.11-slim@{PIN}": "mirror.example/python:3.11-pinned",
                                   "docker.io/library/golang:1.22": "mirror.example/golang:1.22"})


def test_plain_and_digest_pinned_refs_are_mapped():
    text = f"# base\nFROM debian:bookworm-slim@{PIN}\nRUN echo FROM debian:bookworm-slim\n"
    out, uses = rewrite_bases(text, SETTINGS.map_ref)
    assert out == "# base\nFROM localhost/debian:bookworm-slim\nRUN echo FROM debian:bookworm-slim\n"
    assert [(u.line, u.written, u.image, u.mapped) for u in uses] == [
        (2, f"debian:bookworm-slim@{PIN}", "localhost/debian:bookworm-slim", True)]


def test_a_pinned_key_matches_only_its_digest():
    out, _ = rewrite_bases(f"FROM python:3.11-slim@{PIN}\n", SETTINGS.map_ref)
    assert out == "FROM mirror.example/python:3.11-pinned\n"
    other = "sha256:" + "cd" * 32
    out, uses = rewrite_bases(f"FROM python:3.11-slim@{other}\n", SETTINGS.map_ref)
    assert out == f"FROM python:3.11-slim@{other}\n" and not uses[0].mapped


def test_stages_flags_and_case_are_kept():
    text = ("ARG V=1\n"
            "from --platform=linux/amd64 golang:1.22 AS build\r\n"
            "RUN go build\n"
            "FROM build as second\n"
            "FROM debian:bookworm-slim\n"
            "COPY --from=build /out /usr/local/bin/\n"
            "COPY --chown=0:0 --from=docker.io/library/debian:bookworm-slim /etc/os-release /x\n"
            "FROM scratch\n")
    out, uses = rewrite_bases(text, SETTINGS.map_ref)
    assert out == ("ARG V=1\n"
                   "from --platform=linux/amd64 mirror.example/golang:1.22 AS build\r\n"
                   "RUN go build\n"
                   "FROM build as second\n"
                   "FROM localhost/debian:bookworm-slim\n"
                   "COPY --from=build /out /usr/local/bin/\n"
                   "COPY --chown=0:0 --from=localhost/debian:bookworm-slim /etc/os-release /x\n"
                   "FROM scratch\n")
    assert [u.written for u in uses] == ["golang:1.22", "debian:bookworm-slim", "docker.io/library/debian:bookworm-slim"]


def test_unmapped_and_arg_bases_stay_as_written():
    text = "ARG BASE=debian:bookworm-slim\nFROM ${BASE}\nFROM ubuntu:24.04\n"
    out, uses = rewrite_bases(text, SETTINGS.map_ref)
    assert out == text
    assert [(u.written, u.mapped) for u in uses] == [("ubuntu:24.04", False)]
    assert has_unresolved_base(text) and not has_unresolved_base("FROM debian:bookworm-slim\n")
