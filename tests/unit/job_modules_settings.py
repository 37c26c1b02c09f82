"""The test settings, with a URLconf that imports a job module and ``IMPORT_MODULES`` from the environment."""

import json
import os

from tests.settings import *  # noqa: F403

ROOT_URLCONF = "tests.unit.job_modules_urls"
JOBS = {**JOBS, "IMPORT_MODULES": json.loads(os.environ.get("JOBS_TEST_IMPORT_MODULES", "[]"))}  # noqa: F405
