"""Writes rlstack's own small Harbor dataset: ``python -m rlstack.episodes.harbor.make_tasks --out examples/tasks``.

Twenty-one CPU-sized tasks a small model can learn with a bash or write-file tool: arithmetic
into a file, reading a file, fixing a one-line bug. Each has a reference solution
(``solution/solve.sh``, reward 1) and a verifier that gives 0 to an untouched workspace.
Verifiers need bash and python3's standard library, which each task's image installs
(``FROM debian:bookworm-slim``, python3 from Debian), so a trial runs in that image; the host's
tools have both too (``environment: host``). Deterministic: the
committed ``examples/tasks`` is this script's output, and a test keeps it so.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
from dataclasses import dataclass, field
from pathlib import Path

ORG = "rlstack"
SEED = 7
MARKER = "python -m rlstack.episodes.harbor.make_tasks"


@dataclass
class TaskSpec:
    name: str
    instruction: str
    check: str
    """Python run by the verifier; exits non-zero (with a reason) unless the task is solved."""
    solve: str
    """Bash, the reference solution."""
    category: str
    files: dict[str, str] = field(default_factory=dict)
    """The workspace (/app) at the start."""
    agent_timeout_sec: float = 120.0


def answer_check(expected: str, path: str = "/app/answer.txt") -> str:
    return f'''"""Passes when {path} holds {expected!r}."""
import sys
from pathlib import Path

path = Path({path!r})
if not path.is_file():
    sys.exit("no {path}")
got = path.read_text().strip()
if got != {expected!r}:
    sys.exit(f"{path} holds {{got!r}}, expected {expected!r}")
print("ok")
'''


def multiply(rng: random.Random) -> TaskSpec:
    a, b = rng.randint(11, 99), rng.randint(11, 99)
    return TaskSpec(name=f"multiply-{a}x{b}", category="arithmetic",
                    instruction=f"Compute {a} * {b} and write the result, as a plain integer, to /app/answer.txt.\n",
                    check=answer_check(str(a * b)), solve=f"echo {a * b} > /app/answer.txt\n")


def sum_file(rng: random.Random, index: int) -> TaskSpec:
    numbers = [rng.randint(-50, 200) for _ in range(rng.randint(5, 8))]
    return TaskSpec(name=f"sum-numbers-{index}", category="files",
                    instruction="The file /app/numbers.txt holds one integer per line. Write their sum, "
                                "as a plain integer, to /app/answer.txt.\n",
                    files={"numbers.txt": "".join(f"{n}\n" for n in numbers)}, check=answer_check(str(sum(numbers))),
                    solve="awk '{ s += $1 } END { print s }' /app/numbers.txt > /app/answer.txt\n")


WORDS = ["apple", "river", "stone", "cloud", "maple", "ember", "tiger", "lemon", "orbit", "pixel", "quartz", "delta"]


def count_lines(rng: random.Random, index: int) -> TaskSpec:
    lines = rng.sample(WORDS, rng.randint(4, 11))
    return TaskSpec(name=f"count-lines-{index}", category="files",
                    instruction="Count the lines of /app/words.txt and write the count, as a plain integer, "
                                "to /app/answer.txt.\n",
                    files={"words.txt": "".join(f"{w}\n" for w in lines)}, check=answer_check(str(len(lines))),
                    solve="wc -l < /app/words.txt | tr -d ' ' > /app/answer.txt\n")


def greeting(text: str, index: int) -> TaskSpec:
    return TaskSpec(name=f"write-greeting-{index}", category="files",
                    instruction=f"Create the file /app/greeting.txt containing exactly this line: {text}\n",
                    check=answer_check(text, "/app/greeting.txt"), solve=f"echo '{text}' > /app/greeting.txt\n")


def uppercase(rng: random.Random, index: int) -> TaskSpec:
    text = " ".join(rng.sample(WORDS, 5)) + "\n"
    return TaskSpec(name=f"uppercase-{index}", category="files",
                    instruction="Write the contents of /app/input.txt in upper case to /app/output.txt.\n",
                    files={"input.txt": text}, check=answer_check(text.strip().upper(), "/app/output.txt"),
                    solve="tr '[:lower:]' '[:upper:]' < /app/input.txt > /app/output.txt\n")


def json_field(rng: random.Random, index: int) -> TaskSpec:
    config = {"name": rng.choice(WORDS), "port": rng.randint(1024, 9999), "debug": False}
    return TaskSpec(name=f"json-port-{index}", category="files",
                    instruction="Read /app/config.json and write the value of its \"port\" field to /app/answer.txt.\n",
                    files={"config.json": json.dumps(config, indent=2) + "\n"}, check=answer_check(str(config["port"])),
                    solve="python3 -c \"import json; print(json.load(open('/app/config.json'))['port'])\" "
                          "> /app/answer.txt\n")


# (function, buggy line, fixed line, cases the hidden test checks)
BUGS = [
    ("add(a, b)", "return a - b", "return a + b", [((2, 3), 5), ((-4, 10), 6), ((0, 0), 0)]),
    ("subtract(a, b)", "return b - a", "return a - b", [((9, 4), 5), ((1, 7), -6), ((3, 3), 0)]),
    ("multiply(a, b)", "return a + b", "return a * b", [((6, 7), 42), ((2, 2), 4), ((-3, 5), -15)]),
    ("largest(items)", "return min(items)", "return max(items)", [(([3, 9, 4],), 9), (([-5, -2],), -2), (([7],), 7)]),
    ("is_even(n)", "return n % 2 == 1", "return n % 2 == 0", [((4,), True), ((7,), False), ((0,), True)]),
]


def fix_bug(index: int) -> TaskSpec:
    signature, buggy, fixed, cases = BUGS[index]
    function = signature.split("(")[0]
    calc = f'"""A tiny calculator module."""\n\n\ndef {signature}:\n    {buggy}\n'
    visible = cases[0]
    test_calc = (f"from calc import {function}\n\n"
                 f"assert {function}(*{visible[0]!r}) == {visible[1]!r}, {function}(*{visible[0]!r})\n"
                 f"print(\"ok\")\n")
    check = f'''"""Passes when /app/calc.py's {function} is fixed."""
import importlib.util
import sys

spec = importlib.util.spec_from_file_location("calc", "/app/calc.py")
calc = importlib.util.module_from_spec(spec)
try:
    spec.loader.exec_module(calc)
except Exception as exc:
    sys.exit(f"/app/calc.py does not load: {{exc!r}}")
for args, expected in {cases!r}:
    got = calc.{function}(*args)
    if got != expected:
        sys.exit(f"{function}{{args}} = {{got!r}}, expected {{expected!r}}")
print("ok")
'''
    return TaskSpec(name=f"fix-{function.replace('_', '-')}", category="debugging",
                    instruction="There is a one-line bug in /app/calc.py: `cd /app && python3 test_calc.py` fails. "
                                "Fix the bug so that the test passes.\n",
                    files={"calc.py": calc, "test_calc.py": test_calc}, check=check,
                    solve=f"sed -i 's/{buggy}/{fixed}/' /app/calc.py\n")


def all_tasks() -> list[TaskSpec]:
    rng = random.Random(SEED)
    tasks = [multiply(rng) for _ in range(5)]
    tasks += [sum_file(rng, i) for i in range(1, 4)]
    tasks += [count_lines(rng, i) for i in range(1, 3)]
    tasks += [fix_bug(i) for i in range(len(BUGS))]
    tasks += [greeting(text, i) for i, text in enumerate(["hello, rlstack", "tasks are directories"], 1)]
    tasks += [uppercase(rng, i) for i in range(1, 3)]
    tasks += [json_field(rng, i) for i in range(1, 3)]
    return tasks


FAMILIES = ("multiply", "sum-numbers", "count-lines", "write-greeting", "uppercase", "json-port", "fix")


def generate(count: int, seed: int, families: tuple[str, ...] = FAMILIES) -> list[TaskSpec]:
    """``count`` random tasks of the given families in turn, named ``<family>-s<seed>-<n>``:
    training sets for the agent demo (different seeds give disjoint draws of the same families)."""
    unknown = set(families) - set(FAMILIES)
    if unknown or not families:
        raise ValueError(f"unknown task families {sorted(unknown)}; known: {', '.join(FAMILIES)}")
    rng = random.Random(seed)
    tasks = []
    for n in range(count):
        family = families[n % len(families)]
        if family == "multiply":
            spec = multiply(rng)
        elif family == "sum-numbers":
            spec = sum_file(rng, n)
        elif family == "count-lines":
            spec = count_lines(rng, n)
        elif family == "write-greeting":
            spec = greeting(" ".join(rng.sample(WORDS, rng.randint(1, 3))), n)
        elif family == "uppercase":
            spec = uppercase(rng, n)
        elif family == "json-port":
            spec = json_field(rng, n)
        else:
            spec = fix_bug(rng.randrange(len(BUGS)))
        spec.name = f"{family}-s{seed}-{n}"
        tasks.append(spec)
    return tasks


TEST_SH = """#!/bin/bash
# Verifier: reward 1 when /tests/test_outputs.py passes, else 0.
mkdir -p /logs/verifier
if python3 /tests/test_outputs.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
"""

DOCKERFILE = """FROM debian:bookworm-slim
# The verifiers (and the fix-* tasks' own tests) run python3: the image installs it.
RUN apt-get update && apt-get install -y --no-install-recommends python3 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY . /app/
"""


def task_toml(spec: TaskSpec) -> str:
    def s(text: str) -> str:
        return json.dumps(text)  # a JSON string is a valid TOML basic string

    return (f"schema_version = \"1.1\"\n\n[task]\nname = {s(f'{ORG}/{spec.name}')}\n"
            f"description = {s(spec.instruction.strip())}\nkeywords = [{s(spec.category)}]\n\n"
            f"[metadata]\ndifficulty = \"easy\"\ncategory = {s(spec.category)}\ngenerator = {s(MARKER)}\n\n"
            f"[agent]\ntimeout_sec = {spec.agent_timeout_sec}\n\n[verifier]\ntimeout_sec = 30.0\n\n"
            f"[environment]\ncpus = 1\nmemory_mb = 2048\nstorage_mb = 1024\n")


def write_task(spec: TaskSpec, out: Path) -> Path:
    root = out / spec.name
    if root.exists():
        shutil.rmtree(root)
    files: dict[str, str] = {
        "task.toml": task_toml(spec), "instruction.md": spec.instruction,
        "environment/Dockerfile": DOCKERFILE, "environment/.dockerignore": "Dockerfile\n.dockerignore\n",
        "tests/test.sh": TEST_SH, "tests/test_outputs.py": spec.check,
        "solution/solve.sh": f"#!/bin/bash\n# Reference solution.\nset -euo pipefail\n{spec.solve}",
        **{f"environment/{name}": text for name, text in spec.files.items()},
    }
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o755 if relative.endswith(".sh") else 0o644)
    return root


def write_readme(tasks: list[TaskSpec], out: Path) -> None:
    rows = "\n".join(f"| `{t.name}` | {t.category} | {t.instruction.strip()} |" for t in tasks)
    (out / "README.md").write_text(
        f"# rlstack's example tasks (Harbor format)\n\nGenerated by `{MARKER} --out examples/tasks`; "
        "do not edit by hand. See docs/agent-trials.md.\n\n"
        f"| task | kind | instruction |\n|---|---|---|\n{rows}\n")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=MARKER, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("examples/tasks"))
    parser.add_argument("--count", type=int, default=None, help="write this many random tasks instead of the shipped set")
    parser.add_argument("--seed", type=int, default=1, help="with --count: which draw")
    args = parser.parse_args(argv)
    tasks = all_tasks() if args.count is None else generate(args.count, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in tasks:
        write_task(spec, args.out)
    write_readme(tasks, args.out)
    print(f"wrote {len(tasks)} tasks to {args.out}")


if __name__ == "__main__":
    main()
