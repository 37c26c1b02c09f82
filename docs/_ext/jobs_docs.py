"""The site's own Sphinx extension: reference entries generated from the code, so they cannot drift.

- ``{setting} NAME``: one ``settings.JOBS`` key. The prose is the page's; the default and the type
  are read from ``django_jobs.conf.JobsSettings``, and the build fails if a key has no entry or an
  entry names no key.
- ``{check} ID``: one system check. The build fails unless the ids documented are exactly the ids
  the code can report (``jobs_sources.check_ids``).
- ``{jobs-metrics} worker|web|both``: every metric of that endpoint, from the metric declarations.
- ``{jobs-alerts}``: every alerting rule of the shipped ``alerts.yml``.
- ``{jobs-command} NAME``: a management command, its usage and every option of its argparse parser
  (subcommands included); the directive's content is the page's prose. The build fails if a command
  of the app has no entry.
- The public names (``__all__``) of ``django_jobs``, ``django_jobs.testing`` and ``django_jobs.tasks``
  must each be documented by autodoc.
- ``<!-- excerpt -->`` and ``<!-- run: ... -->`` before a code block (the convention
  ``tests/unit/test_docs.py`` enforces) label the block on the page.

Each entry is an object of Sphinx's standard domain, so it has an anchor, a role to link to it
(``{setting}`LEASE_SECONDS```) and entries in the general index; the search finds it by name.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

import jobs_sources as sources
from docutils import nodes
from docutils.statemachine import StringList
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.domains.std import GenericObject
from sphinx.environment import BuildEnvironment
from sphinx.transforms import SphinxTransform
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

#: The modules whose public names (``__all__``) the API reference must document.
API_MODULES = ("django_jobs", "django_jobs.testing", "django_jobs.tasks")
#: The code each generated page is read from: a change there rebuilds the page.
SETTINGS_SOURCE = "django_jobs/conf.py"
METRIC_SOURCES = tuple(sources.SERVED_BY)
COMMANDS_SOURCE = "django_jobs/management/commands"

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|{}$])")


def escape(text: str) -> str:
    """Text from the code, shown as it is inside generated Markdown."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


class Generated(SphinxDirective):
    """A directive whose output is Markdown built from the code, parsed in place."""

    def parse(self, lines: list[str]) -> list[nodes.Node]:
        container = nodes.container()
        self.state.nested_parse(StringList(lines, source=self.get_source_info()[0]), self.content_offset,
                                container)  # fmt: skip
        return list(container.children)

    def depend_on(self, *relative: str) -> None:
        for path in relative:
            self.env.note_dependency(str(sources.ROOT / path))


# --- settings ------------------------------------------------------------------------------------


class SettingDirective(GenericObject):
    """``{setting} NAME``: the page's prose, under the default and type the code declares."""

    indextemplate = "pair: %s; setting"

    def transform_content(self, content_node: addnodes.desc_content) -> None:
        name = self.arguments[0].strip()
        self.env.note_dependency(str(sources.ROOT / SETTINGS_SOURCE))
        found = {s.name: s for s in sources.settings()}.get(name)
        if found is None:
            logger.warning("JOBS has no setting %r (django_jobs/conf.py)", name, location=self.get_location())
            return
        line = nodes.paragraph()
        line += nodes.strong(text="Default: ")
        line += nodes.literal(text=sources.value_text(found.default))
        line += nodes.Text(sources.span_text(found.default) + " · type ")
        line += nodes.literal(text=found.type)
        content_node.insert(0, line)


# --- metrics and alerts --------------------------------------------------------------------------

ENDPOINTS = {
    "worker": "the worker endpoint ({option}`runjobs --metrics-port`)",
    "web": "the web side's `/metrics` (django-prometheus)",
    "both": "both endpoints",
}


class MetricsDirective(Generated):
    """``{jobs-metrics} worker``: every metric one endpoint serves, read from its declaration."""

    required_arguments = 1

    def run(self) -> list[nodes.Node]:
        served = self.arguments[0]
        self.depend_on(*METRIC_SOURCES)
        lines: list[str] = []
        for metric in sources.metrics():
            if metric.served != served:
                continue
            labels = ", ".join(f"`{label}`" for label in metric.labels) or "none"
            lines += [f"````{{metric}} {metric.name}",
                      f"*{metric.type}* · labels: {labels} · served by {ENDPOINTS[served]}", "",
                      escape(metric.help), "````", ""]  # fmt: skip
        return self.parse(lines)


class AlertsDirective(Generated):
    """``{jobs-alerts}``: every rule of the shipped ``alerts.yml``, with its expression."""

    def run(self) -> list[nodes.Node]:
        self.depend_on(sources.ALERT_RULES.relative_to(sources.ROOT).as_posix())
        lines: list[str] = []
        for alert in sources.alerts():
            wait = f" · fires after `for: {alert.wait}`" if alert.wait else ""
            lines += [f"````{{alert}} {alert.name}", f"*severity: {alert.severity}*{wait}", "",
                      escape(alert.summary), "", f"**Runbook:** {escape(alert.runbook)}", "",
                      "```promql", *alert.expr.splitlines(), "```", "````", ""]  # fmt: skip
        return self.parse(lines)


class GeneratedBlocks(SphinxTransform):
    """The PromQL of each alert is copied from ``alerts.yml``: labelled so."""

    default_priority = 400

    def apply(self, **kwargs: Any) -> None:
        for desc in self.document.findall(addnodes.desc):
            if desc.get("objtype") == "alert":
                for block in desc.findall(nodes.literal_block):
                    block["classes"].append("generated")


# --- management commands -------------------------------------------------------------------------


class CommandDirective(Generated):
    """``{jobs-command} NAME``: the command, the page's prose, then its options from its parser."""

    required_arguments = 1
    has_content = True

    def run(self) -> list[nodes.Node]:
        self.depend_on(f"{COMMANDS_SOURCE}/{self.arguments[0]}.py")
        found = sources.command(self.arguments[0])
        header = [f"````{{command}} {found.program}", escape(found.description), "", _usage(found), "````"]
        prose = self.parse(list(self.content)) if self.content else []
        return [*self.parse(header), *prose, *self.parse(_options(found))]


def _usage(found: sources.Command) -> str:
    return f"**Usage:** `{found.usage.replace(' [-h]', '')}`"


def _options(found: sources.Command, sub: bool = False) -> list[str]:
    lines = []
    if sub:
        lines += [f"```{{rubric}} {found.program}", "```", escape(found.description), "", _usage(found), ""]
    lines += [f"```{{program}} {found.program}", "```", ""]
    for option in found.options:
        signature = ", ".join(f"{flag} {option.metavar}".strip() for flag in option.flags)
        notes = []
        if option.choices:
            notes.append("one of " + ", ".join(f"`{c}`" if c else '`""` (any)' for c in option.choices))
        if option.repeatable:
            notes.append("repeatable" if not option.positional else "any number")
        text = escape(option.help) + (f" ({'; '.join(notes)})" if notes else "")
        lines += [f"```{{option}} {signature}", text or "(no help text)", "```", ""]
    for subcommand in found.subcommands:
        lines += _options(subcommand, sub=True)
    return lines


# --- code-block markers --------------------------------------------------------------------------

#: ``<!-- excerpt -->``, ``<!-- run: python -->``, ``<!-- quickstart: billing/jobs.py -->``.
MARKER = re.compile(r"^<!--\s*(excerpt|run:\s*\S+|quickstart:\s*[^>]+?)\s*-->\s*$")


class MarkedBlocks(SphinxTransform):
    """Gives each code block the class of the marker before it: ``excerpt`` or ``tested``."""

    default_priority = 400

    def apply(self, **kwargs: Any) -> None:
        for raw in list(self.document.findall(nodes.raw)):
            found = MARKER.match(raw.astext().strip())
            block = raw.next_node(nodes.literal_block, siblings=True, descend=False)
            if found and block is not None and block.parent is raw.parent:
                block["classes"].append("excerpt" if found[1] == "excerpt" else "tested")


# --- completeness --------------------------------------------------------------------------------


def check_completeness(app: Sphinx, env: BuildEnvironment) -> None:
    """Fail the build (a warning, under -W) where the reference and the code disagree."""
    std = env.get_domain("std")
    documented: dict[str, set[str]] = {}
    for (objtype, name), _target in std.objects.items():  # type: ignore[attr-defined]
        documented.setdefault(objtype, set()).add(name)
    _compare("setting", documented.get("setting", set()), {s.name for s in sources.settings()})
    _compare("system check", documented.get("check", set()), set(sources.check_ids()))
    _compare("management command", documented.get("command", set()), set(sources.command_names()))
    python = {name for name, *_ in env.get_domain("py").get_objects()}
    for module in API_MODULES:
        public = {f"{module}.{name}" for name in importlib.import_module(module).__all__}
        _compare(f"public name of {module}", python & public, public)


def _compare(what: str, documented: set[str], in_code: set[str]) -> None:
    for name in sorted(in_code - documented):
        logger.warning("the reference has no entry for the %s %s", what, name, type="jobs", subtype="missing")
    for name in sorted(documented - in_code):
        logger.warning("the reference documents the %s %s, which the code does not have", what, name,
                       type="jobs", subtype="unknown")  # fmt: skip


#: Django classes by the module that defines them (what autodoc sees in a signature), and the name
#: Django's documentation gives them (what its inventory lists).
DJANGO_NAMES = {
    "django.http.request.HttpRequest": "django.http.HttpRequest",
    "django.http.response.HttpResponse": "django.http.HttpResponse",
    "django.contrib.auth.base_user.AbstractBaseUser": "django.contrib.auth.models.AbstractBaseUser",
}


def documented_name(app: Sphinx, env: BuildEnvironment, node: Any, contnode: Any) -> Any:
    """Resolve a reference by the name its object is documented under: a Django class autodoc names by
    its defining module, through the name Django documents; a short name in the docstring of an inner
    module (``:func:`resume``` in ``django_jobs.flow.pausing``), through the public ``django_jobs``
    name it is documented as."""
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    if target in DJANGO_NAMES:
        from sphinx.ext.intersphinx import missing_reference

        node["reftarget"] = DJANGO_NAMES[target]
        return missing_reference(app, env, node, contnode)
    public = f"{API_MODULES[0]}.{target.rpartition('.')[2]}"
    python = env.get_domain("py")
    if any(name == public for name, *_ in python.get_objects()):
        return python.resolve_xref(env, node["refdoc"], app.builder, node["reftype"], public, node, contnode)
    return None


def expose_lazy_names(app: Sphinx) -> None:
    """The API modules import some public names on first use (``__getattr__``); autodoc lists only
    what a module holds, so bind each one before it looks."""
    for module_name in API_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            setattr(module, name, getattr(module, name))


def setup(app: Sphinx) -> dict[str, Any]:
    for objtype, index in [("setting", "setting"), ("check", "system check"), ("metric", "metric"),
                           ("alert", "alert"), ("command", "management command")]:  # fmt: skip
        app.add_object_type(objtype, objtype, indextemplate=f"pair: %s; {index}")
    app.add_directive_to_domain("std", "setting", SettingDirective, override=True)
    app.add_directive("jobs-metrics", MetricsDirective)
    app.add_directive("jobs-alerts", AlertsDirective)
    app.add_directive("jobs-command", CommandDirective)
    app.add_transform(MarkedBlocks)
    app.add_transform(GeneratedBlocks)
    app.add_css_file("jobs.css")
    app.connect("builder-inited", expose_lazy_names)
    app.connect("env-check-consistency", check_completeness)
    app.connect("missing-reference", documented_name)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
