"""``benchmarks/run --against DIR``: this checkout and another one side by side, in alternating rounds.

A shared machine's speed drifts by tens of percent within minutes, so two trees are compared round by
round: each round runs this checkout's ``benchmarks/run`` and then DIR's (each with its own
virtualenv, its own private Redis and the same arguments), and the table gives each figure's median
for both and the median of the per-round ratios, which the drift moves least.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from .infra import REPO

#: A figure compared: its label, and its path into the JSON of one run.
Figure = tuple[str, tuple[str, ...]]


def figures(result: dict[str, Any]) -> Iterator[Figure]:
    """Every comparable number one ``--json`` result holds."""
    for key in result.get("throughput", {}):
        yield f"throughput {key}, jobs/s", ("throughput", key)
    for key, counts in result.get("commands", {}).items():
        for measure in ("commands", "round_trips"):
            if measure in counts:
                yield f"Redis {measure} per job, {key}", ("commands", key, measure)
    if "enqueue_tx" in result:
        yield "enqueue in one atomic(), s", ("enqueue_tx", "django_jobs")
    if "enqueue_single" in result:
        yield "enqueue one by one, s", ("enqueue_single", "django_jobs")
    for setup, measures in result.get("setups", {}).items():  # {setup: {measure: median}}
        for measure in measures:
            yield f"setup {setup}, {measure}", ("setups", setup, measure)


def _value(result: dict[str, Any], path: Sequence[str]) -> float | None:
    node: Any = result
    for part in path:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return float(node) if isinstance(node, int | float) else None


def _python(tree: Path) -> str:
    venv = tree / ".venv" / "bin" / "python"
    if not venv.exists():
        raise SystemExit(f"{tree} has no .venv: run scripts/test (or scripts/demo) there once first")
    return str(venv)


def _one(tree: Path, argv: Sequence[str], out: Path, log: Callable[[str], None]) -> dict[str, Any]:
    log(f"--- {tree} ---")
    command = [_python(tree), "-m", "benchmarks.run", *argv, "--json", str(out)]
    done = subprocess.run(command, cwd=tree, stdout=subprocess.DEVNULL, check=False)
    if not out.exists():
        raise SystemExit(f"the benchmark in {tree} wrote no results (exit {done.returncode})")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def compare(other: Path, rounds: int, argv: Sequence[str], log: Callable[[str], None]) -> str:
    """Run both trees ``rounds`` times, alternating, and render the side-by-side table."""
    runs: dict[Path, list[dict[str, Any]]] = {REPO: [], other: []}
    with tempfile.TemporaryDirectory(prefix="django-jobs-against-") as tmp:
        for number in range(rounds):
            order = (REPO, other) if number % 2 == 0 else (other, REPO)  # neither always goes first
            for tree in order:
                out = Path(tmp) / f"{number}-{len(runs[tree])}-{tree.name}.json"
                runs[tree].append(_one(tree, argv, out, log))
    return render(runs[REPO], runs[other], other)


def render(ours: list[dict[str, Any]], theirs: list[dict[str, Any]], other: Path) -> str:
    lines = [
        f"This checkout against {other}, {len(ours)} alternating round(s) of `benchmarks/run "
        "...`; medians, and the median of the per-round ratios (this / other).",
        "",
        "| figure | this | other | ratio (per-round median) | rounds' ratios |",
        "|---|---|---|---|---|",
    ]
    for label, path in figures(ours[0]):
        pairs = [(_value(a, path), _value(b, path)) for a, b in zip(ours, theirs, strict=True)]
        pairs_known = [(a, b) for a, b in pairs if a is not None and b is not None]
        if not pairs_known:
            continue
        ratios = [a / b for a, b in pairs_known if b]
        mine = statistics.median(a for a, _ in pairs_known)
        other_median = statistics.median(b for _, b in pairs_known)
        spread = " ".join(f"{r:.2f}" for r in ratios)
        ratio = f"{statistics.median(ratios):.3f}" if ratios else "n/a"
        lines.append(f"| {label} | {mine:,.3f} | {other_median:,.3f} | {ratio} | {spread} |")
    return "\n".join(lines)


def without(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """``argv`` less each of ``options`` and its value (``--x V`` or ``--x=V``)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not arg.startswith(tuple(f"{option}=" for option in options)):
            kept.append(arg)
    return kept


def main(other: str, rounds: int, argv: Sequence[str]) -> int:
    tree = Path(other).resolve()
    if not (tree / "benchmarks" / "run.py").exists():
        raise SystemExit(f"{tree} is not a django_jobs checkout (no benchmarks/run.py)")

    def log(message: str) -> None:
        print(message, file=sys.stderr, flush=True)

    print(compare(tree, rounds, argv, log))
    return 0
