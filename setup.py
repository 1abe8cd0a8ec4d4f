"""The one compiled part, the bulk split in C (triage/sources/_bulkscan.c); everything else is in pyproject.toml.

Optional: where it does not build (no compiler, no Python headers) the install goes on and triage/sources/scan.py
splits in Python, with the same answers.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("triage.sources._bulkscan", ["triage/sources/_bulkscan.c"], optional=True)])
