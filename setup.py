"""The compiled parts, in C: the bulk split (triage/sources/_bulkscan.c) and a stats run's figures
(triage/logs/_statsfold.c); everything else is in pyproject.toml.

Optional: where they do not build (no compiler, no Python headers) the install goes on and triage/sources/scan.py
splits, triage/logs/statsrun.py takes the figures, in Python, with the same answers.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("triage.sources._bulkscan", ["triage/sources/_bulkscan.c"], optional=True),
                   Extension("triage.logs._statsfold", ["triage/logs/_statsfold.c"], optional=True)])
