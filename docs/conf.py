"""The documentation site: Sphinx, the Furo theme, and MyST so that the pages are Markdown.

Build it (what CI runs, through ``nox -s docs``)::

    sphinx-build -E -W --keep-going -n -b html docs var/docs-html

Warnings are errors and every cross-reference must resolve (``-n``, nitpicky); ``-E`` reads every page
afresh, so a page that did not change still reports its warnings. The reference pages
for settings, system checks, metrics, alerts and management commands are generated from the code by
``_ext/jobs_docs.py``; ``_ext/docs_settings.py`` is the Django project autodoc imports the package in.
"""

from __future__ import annotations

import os
import sys
from importlib.metadata import version as installed_version
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "docs_settings")

import django  # noqa: E402

django.setup()

project = "django_jobs"
author = "django_jobs contributors"
copyright = "django_jobs contributors"
# One version: pyproject.toml's, as the installed package's metadata says it.
release = installed_version("django-durable-jobs")
version = ".".join(release.split(".")[:2])

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.intersphinx", "jobs_docs"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext", "_inventories", "_static"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links, checked like every other reference

# Nitpicky: every reference must resolve. Listed here only what cannot, each with its reason.
nitpicky = True
nitpick_ignore = [
    # Type variables of the generic Job[P, R] and its decorators: they have no page anywhere.
    ("py:class", "P"),
    ("py:class", "R"),
    ("py:class", "django_jobs.core.registry.P"),
    ("py:class", "django_jobs.core.registry.R"),
    # The Tasks framework's classes, named in string annotations that autodoc cannot qualify: they
    # are django.tasks' on Django 6.0 and the django_tasks backport's on 5.2.
    ("py:class", "Task"),
    ("py:class", "TaskResult"),
    # ParamSpec arguments (*args: P.args), which Sphinx renders as a reference to "typing.~P".
    ("py:obj", "typing.~P"),
    # A type alias declared for type checkers only (AbstractBaseUser | AnonymousUser | None): it does
    # not exist at run time, so autodoc cannot follow it.
    ("py:class", "Actor"),
    # Internals that appear in signatures of the public API but are not part of it.
    ("py:class", "django_jobs.store.read.Where"),
    ("py:class", "django_jobs.store.record.JobRecord"),
    ("py:class", "django_jobs.core.envelope.Envelope"),
    ("py:class", "django_jobs.core.envelope.Options"),
    # The store's table of where each state lives, which State's docstring names: internal.
    ("py:data", "STATES"),
]

autodoc_member_order = "bysource"
autodoc_typehints_format = "short"

# Intersphinx without the network: each mapping's inventory is a local file (the second element of
# the pair) instead of the project's objects.inv, so the build neither downloads nor warns. The files
# in _inventories/ are plain text (Sphinx's inventory format version 1) and list only the Python and
# Django objects these pages link to; the links go to the real sites. A new link to Python's or
# Django's documentation needs its line there, or the nitpicky build fails and says which.
intersphinx_mapping = {
    "python": ("https://docs.python.org/3/", str(HERE / "_inventories" / "python.inv")),
    "django": ("https://docs.djangoproject.com/en/6.0/", str(HERE / "_inventories" / "django.inv")),
}
intersphinx_cache_limit = 0  # read the local files on every build: they are the source

html_theme = "furo"
html_title = f"django_jobs {release}"
html_static_path = ["_static"]
