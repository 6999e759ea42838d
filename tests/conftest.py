"""Shared test paths: llama.cpp's fixtures (../shared/fixtures) and the real models (`make models`).

Fixtures are read in place, never copied. Tests that need a real model call `real_model_path(name)`
(or use the `real_model` fixture), which skips the test cleanly when the file has not been fetched.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO.parent / "shared" / "fixtures"
MODELS = REPO / "models"

TINY_MODELS = FIXTURES / "tiny" / "models"  # random-weight llama/qwen2/mistral3 files, all types
VOCABS = FIXTURES / "vocab"  # vocab-only GGUFs (no tensors)

# the real models of the fixtures, by file name (CI fetches the first two, the 1.5B only optionally)
SMOLLM2 = "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_05B = "qwen2.5-coder-0.5b-instruct-awq-q4_k_m.gguf"
QWEN_15B = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
REAL_MODELS = (SMOLLM2, QWEN_05B, QWEN_15B)

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tests import conftest helpers by name


def real_model_path(name: str) -> Path:
    """Path of a real model fetched by `make models` (file name as in the fixtures), or skip the test."""
    path = MODELS / Path(name).name
    if not path.exists():
        pytest.skip(f"{path.name} not fetched (run `make models`, or `make models-large` for the 1.5B)")
    return path


@pytest.fixture
def real_model():
    """`real_model_path` as a fixture: `def test_x(real_model): path = real_model(SMOLLM2)`."""
    return real_model_path
