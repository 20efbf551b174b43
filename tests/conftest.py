"""Shared fixtures: every test starts from the same random state."""

import os

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
    yield


@pytest.fixture
def one_thread():
    """Tiny tensors: one thread is faster than two, and much faster on a busy machine."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# Longest first: `make test` spreads whole files over two workers (--dist loadfile), in the order
# they are collected; a slow file dealt last keeps one worker busy while the other idles. These
# are the files that took longest in a full run (seconds per file, roughly, on 2 idle cores);
# every other file keeps its place after them. A file missing here only costs time, never a test.
SLOW_FIRST = {
    "test_forgery.py": 120, "test_grade.py": 110, "test_hub.py": 100, "test_browser.py": 90,
    "test_book.py": 90, "test_nbgrader.py": 60, "test_packaging.py": 50, "test_disarmed.py": 40,
    "test_hostile_rows.py": 40, "test_gradescope.py": 40, "test_class_report.py": 40,
    "test_exercises.py": 40, "test_layout.py": 35, "test_hostile.py": 30, "test_explorers.py": 25,
    "04_learned_vs_sinusoidal.ipynb": 30, "08_length_extrapolation.ipynb": 28,
    "09_context_extension.ipynb": 15, "10_language_extrapolation.ipynb": 15,
}


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: -SLOW_FIRST.get(item.path.name, 0))  # stable: ties keep their order


def pytest_runtest_setup(item):
    """nbval starts a notebook's kernel with this process's environment: a learner's kernel draws
    inline, so no backend a test chose (MPLBACKEND=Agg) may reach it."""
    if item.path.suffix == ".ipynb":
        os.environ.pop("MPLBACKEND", None)
