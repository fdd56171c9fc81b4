"""Tests never touch the network: force every loader onto its offline path."""

import os

os.environ.setdefault("COURSE_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")

# Example student submissions (one deliberately not a notebook): data for the grading tests,
# never tests themselves, even when nbval collects notebooks (`make check`).
collect_ignore_glob = ["fixtures/*"]
