"""A user's mistake as one line that names the file, the key or the fix; a traceback only with ``--debug``.

Commands raise ``UserError`` (or let a config's ``ValidationError`` through ``config_error``);
``rlstack.cli.main`` prints the line and exits 2. Anything else is a bug: one line too, with the hint
that ``--debug`` shows where.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError


class UserError(Exception):
    """Something the user can fix; the message is the whole line shown."""


def no_such_file(path: Path, what: str, fix: str) -> UserError:
    """A missing file; a relative path says what it was relative to, since that is the usual cause."""
    where = f" (relative to the current directory, {Path.cwd()})" if not path.is_absolute() else ""
    return UserError(f"{path}: no such {what}{where}: {fix}")


def read_yaml(path: Path, what: str, fix: str) -> dict[str, Any]:
    """A YAML mapping from ``path``, or a ``UserError`` naming the file and what is wrong with it."""
    if not path.is_file():
        raise no_such_file(path, what, fix)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise UserError(f"{path}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a mapping of keys, found {type(data).__name__}")
    return data


def _child(node: object, key: int | str) -> object:
    if isinstance(node, list) and isinstance(key, int) and key < len(node):
        return node[key]
    return node.get(key) if isinstance(node, dict) else None


def _dotted(loc: tuple[int | str, ...], data: object) -> str:
    """``services.2.prot`` read as ``proxy.prot`` when the list's item has a name: the user's word for it."""
    parts: list[str] = []
    node = data
    for key in loc:
        item = _child(node, key)
        if isinstance(key, int) and isinstance(item, dict) and isinstance(item.get("name"), str):
            if parts and parts[-1] == "services":  # a run config's services go by their names
                parts.pop()
            parts.append(item["name"])
        else:
            parts.append(str(key))
        node = item
    return ".".join(parts)


def _problem(error: dict[str, Any]) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown key"
    if error["type"] == "missing":
        return "required key missing"
    value = repr(error.get("input"))
    return f"{error['msg']} (got {value[:60]})"


def config_error(path: Path, exc: ValidationError, data: object) -> UserError:
    """Every problem pydantic found in a config, in one line: ``file: a.b: unknown key; c: ...``."""
    problems = "; ".join(f"{_dotted(tuple(e['loc']), data) or 'top level'}: {_problem(e)}" for e in exc.errors())
    return UserError(f"{path}: {problems}")


def one_line(exc: BaseException, prog: str) -> str:
    """What ``main`` prints for an exception a command let through."""
    if isinstance(exc, UserError):
        return f"{prog}: {exc}"
    first = (str(exc).strip().splitlines() or [""])[0]
    return f"{prog}: {type(exc).__name__}: {first} (rlstack --debug {prog.removeprefix('rlstack ')} ... shows the traceback)"
