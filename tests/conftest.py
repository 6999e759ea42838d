"""Shared test paths: llama.cpp's fixtures (../shared/fixtures) and the real models (`make models`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"
MODELS = REPO / "models"

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests import conftest helpers by name


def real_model_path(name: str) -> Path:
    """Path of a real model fetched by `make models` (file name as in the fixtures), or skip the test."""
    path = MODELS / Path(name).name
    if not path.exists():
        pytest.skip(f"{path.name} not fetched (run `make models`)")
    return path
