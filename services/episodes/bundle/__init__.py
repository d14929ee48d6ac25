"""The agent bundle: every agent's runtime and CLI, with the glibc they run on, in one directory
mounted read-only at ``/opt/rlstack`` in whatever image a task brings (Debian, musl, no python,
no node). Nothing is installed into the image and nothing is downloaded when a trial starts.

``build.py`` assembles it (``python -m rlstack.episodes.bundle build``), ``check.py`` says before a
task's first trial whether an image can run a bundled agent, ``paths.py`` names the programs.
"""
