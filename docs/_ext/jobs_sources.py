"""What the reference pages are generated from, read from the code itself: the settings, the system
check ids, the metrics, the alert rules and the management commands.

Nothing here imports Sphinx: ``jobs_docs`` (the Sphinx extension) renders these, and
``tests/unit/test_docs.py`` checks them without building the site.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "django_jobs"

# --- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    type: str


def settings() -> list[Setting]:
    """Every key of ``settings.JOBS``, in the order ``JobsSettings`` declares them."""
    from django_jobs.conf import DEFAULTS, JobsSettings

    return [Setting(f.name, DEFAULTS[f.name], str(f.type)) for f in dataclasses.fields(JobsSettings)]


def value_text(value: Any) -> str:
    """A default as it is written in ``settings.py``: double quotes, like the rest of the pages."""
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, dict):
        return "{" + ", ".join(f"{value_text(k)}: {value_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(value_text(v) for v in value) + "]"
    return repr(value)


def span_text(value: Any) -> str:
    """ " (30 days)" for a number of seconds that is a whole number of days (above one), else ""."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 86400:
        days, rest = divmod(value, 86400)
        return f" ({int(days)} days)" if rest == 0 else ""
    return ""


# --- system checks -------------------------------------------------------------------------------

_CHECK_ID = re.compile(r"""["'](django_jobs\.[EW]\d{3})["']""")


def check_ids() -> dict[str, list[str]]:
    """Each system check id the code can report, with the modules that report it."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for check_id in sorted(set(_CHECK_ID.findall(path.read_text()))):
            found.setdefault(check_id, []).append(path.relative_to(ROOT).as_posix())
    return found


# --- metrics -------------------------------------------------------------------------------------

#: prometheus_client's constructors: (the type, whether its exposed name gains ``_total``).
_METRIC_CALLS = {
    "Counter": ("counter", True),
    "Gauge": ("gauge", False),
    "Histogram": ("histogram", False),
    "GaugeMetricFamily": ("gauge", False),
    "CounterMetricFamily": ("counter", True),
}
#: Which endpoint serves the metrics a module declares; a module not listed here is an error, so a
#: metric declared somewhere new is placed on purpose.
SERVED_BY = {
    "django_jobs/telemetry/metrics.py": "worker",
    "django_jobs/ops/collectors.py": "web",
}
#: Functions whose metrics both endpoints serve (each endpoint calls them with its own queues).
SERVED_BY_BOTH = {"pause_families"}


@dataclass(frozen=True)
class Metric:
    name: str
    type: str
    labels: tuple[str, ...]
    help: str
    served: str  # "worker", "web" or "both"
    source: str


def metrics() -> list[Metric]:
    """Every metric the package declares, read from its source: name, type, labels and help."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT).as_posix()
        for function, call in _calls(ast.parse(path.read_text())):
            if _callee(call) not in _METRIC_CALLS or not _is_text(call.args[:1]):
                continue
            if relative not in SERVED_BY:
                raise LookupError(f"{relative} declares a metric: add it to SERVED_BY in {__file__}")
            served = "both" if function in SERVED_BY_BOTH else SERVED_BY[relative]
            found.append(_metric(call, served, relative))
    return sorted(found, key=lambda m: m.name)


def _calls(tree: ast.AST, function: str = "") -> Iterator[tuple[str, ast.Call]]:
    """Each call in ``tree``, with the name of the function it is made in ("" at module level)."""
    for node in ast.iter_child_nodes(tree):
        inner = node.name if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else function
        if isinstance(node, ast.Call):
            yield function, node
        yield from _calls(node, inner)


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _is_text(nodes: list[ast.expr]) -> bool:
    return bool(nodes) and isinstance(nodes[0], ast.Constant) and isinstance(nodes[0].value, str)


def _metric(call: ast.Call, served: str, source: str) -> Metric:
    kind, total = _METRIC_CALLS[_callee(call)]
    name = ast.literal_eval(call.args[0])
    keywords = {k.arg: k.value for k in call.keywords}
    documentation = call.args[1] if len(call.args) > 1 else keywords.get("documentation")
    labels = call.args[2] if len(call.args) > 2 else keywords.get("labels", keywords.get("labelnames"))
    return Metric(
        name=name + ("_total" if total else ""),
        type=kind,
        labels=tuple(ast.literal_eval(labels)) if labels is not None else (),
        help=ast.literal_eval(documentation) if documentation is not None else "",
        served=served,
        source=source,
    )


# --- alert rules ---------------------------------------------------------------------------------

ALERT_RULES = PACKAGE / "deploy" / "prometheus" / "alerts.yml"


@dataclass(frozen=True)
class Alert:
    name: str
    severity: str
    expr: str
    wait: str  # the rule's ``for``, "" if none
    summary: str
    runbook: str


def alerts() -> list[Alert]:
    """Every alerting rule shipped in ``alerts.yml``, in file order."""
    import yaml

    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    return [
        Alert(
            name=rule["alert"],
            severity=rule.get("labels", {}).get("severity", ""),
            expr=rule["expr"].strip(),
            wait=str(rule.get("for", "")),
            summary=rule.get("annotations", {}).get("summary", ""),
            runbook=rule.get("annotations", {}).get("runbook", ""),
        )
        for group in groups
        for rule in group["rules"]
        if "alert" in rule
    ]


# --- management commands -------------------------------------------------------------------------

#: Options every Django command has (BaseCommand.create_parser): documented by Django, not here.
DJANGO_OPTIONS = {"help", "version", "verbosity", "settings", "pythonpath", "traceback", "no_color",
                  "force_color", "skip_checks"}  # fmt: skip


def command_names() -> list[str]:
    """The app's management commands, by module name."""
    folder = PACKAGE / "management" / "commands"
    return sorted(p.stem for p in folder.glob("*.py") if not p.stem.startswith("_"))


@dataclass(frozen=True)
class Option:
    flags: tuple[str, ...]  # ("--max-age",) or, for a positional argument, its name
    metavar: str  # what follows the flag ("" for a switch)
    help: str
    choices: tuple[str, ...]
    positional: bool
    repeatable: bool


@dataclass(frozen=True)
class Command:
    program: str  # "runjobs", or "deadletters list" for a subcommand
    description: str
    usage: str
    options: tuple[Option, ...]
    subcommands: tuple[Command, ...]


def command(name: str) -> Command:
    """A command of the app as its argparse parser declares it (Django must be set up)."""
    from django.core.management import load_command_class

    parser = load_command_class("django_jobs", name).create_parser("manage.py", name)
    return _command(name, parser)


def _command(program: str, parser: argparse.ArgumentParser) -> Command:
    options, subcommands = [], []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for sub, subparser in action.choices.items():
                found = _command(f"{program} {sub}", subparser)
                subcommands.append(dataclasses.replace(found, description=found.description or helps[sub]))
        elif action.dest not in DJANGO_OPTIONS:
            options.append(_option(action))
    usage = " ".join(parser.format_usage().split()).removeprefix("usage: ")
    description = " ".join((parser.description or "").split())
    return Command(program, description, _drop_django_options(usage), tuple(options), tuple(subcommands))


def _option(action: argparse.Action) -> Option:
    positional = not action.option_strings
    metavar = action.metavar or (action.dest if positional else action.dest.upper())
    takes_value = action.nargs != 0
    return Option(
        flags=tuple(action.option_strings) or (str(metavar),),
        metavar=str(metavar) if takes_value and not positional else "",
        help=" ".join((action.help or "").split()) % vars(action) if action.help else "",
        choices=tuple(str(c) for c in action.choices or ()),
        positional=positional,
        repeatable=isinstance(action, argparse._AppendAction) or action.nargs in ("*", "+"),
    )


_DJANGO_USAGE = re.compile(
    r" \[(?:--version|-v \{[0-9,]+\}|--settings SETTINGS|--pythonpath PYTHONPATH|--traceback|--no-color"
    r"|--force-color|--skip-checks)\]"
)


def _drop_django_options(usage: str) -> str:
    return _DJANGO_USAGE.sub("", usage)
