"""Model loading: specs, devices, dtypes and clear errors."""

import pytest
import torch

from core.models.loading import load_model, resolve_dtype
from core.models.specs import BUILTIN_SPECS, SYNTHETIC_SHAPES


def test_tiny_random_is_a_small_llama_with_the_default_tokenizer(tiny):
    assert tiny.model.config.num_hidden_layers == 2
    assert tiny.device.type == "cpu" and tiny.dtype == torch.float32
    assert tiny.tokenizer.chat_template
    assert tiny.tokenizer.pad_token_id is not None


@pytest.mark.slow
def test_synthetic_smollm2_has_the_real_parameter_count():
    loaded = load_model("synthetic:smollm2-135m", device="cpu", dtype="bf16")
    assert loaded.num_parameters == 134_515_008  # the offline SmolLM2-135M-Instruct has exactly this many
    assert loaded.dtype == torch.bfloat16
    rotary = loaded.model.model.rotary_emb.inv_freq
    assert rotary.dtype == torch.float32 and torch.isfinite(rotary).all() and rotary[0] == 1.0


@pytest.mark.parametrize(("shape", "billions"), [("llama-1b", 1.236), ("llama-8b", 8.030), ("llama-70b", 70.554)])
def test_synthetic_shapes_match_the_real_sizes(shape, billions):
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        model = LlamaForCausalLM(LlamaConfig(**SYNTHETIC_SHAPES[shape]))
    params = sum(p.numel() for p in model.parameters())
    assert abs(params / 1e9 - billions) < 0.01


def test_default_spec_listed_first():
    assert BUILTIN_SPECS[0] == "smollm2-135m-instruct"
    assert "tiny-random" in BUILTIN_SPECS


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "no model spec"),
        ("synthetic:llama-700b", "unknown synthetic shape"),
        ("/tmp", "not a model directory"),
        ("/no/such/dir", "no such directory"),
        ("no-such-org/no-such-model", "could not load model .*not in the local Hugging Face cache"),
    ],
)
def test_unknown_spec_is_a_clear_error(spec, message):
    with pytest.raises(ValueError, match=message):
        load_model(spec, device="cpu")


def test_cuda_request_without_gpu_is_clear():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(ValueError, match="no CUDA GPU"):
        load_model("tiny-random", device="cuda")


def test_unknown_device_is_clear():
    with pytest.raises(ValueError, match="unknown device 'gpu0'"):
        load_model("tiny-random", device="gpu0")


def test_dtype_names():
    cpu = torch.device("cpu")
    assert resolve_dtype(None, cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(ValueError, match="unknown dtype"):
        resolve_dtype("int3", cpu)


def test_remote_code_model_is_refused(tmp_path):
    (tmp_path / "config.json").write_text('{"model_type": "my-custom", "auto_map": {"AutoModelForCausalLM": "m.M"}}')
    with pytest.raises(ValueError, match="could not load model"):
        load_model(str(tmp_path), device="cpu")


def test_an_unknown_model_fails_fast_and_names_its_own_loading(monkeypatch):
    """Fast as in "no retries": offline it tries no connection at all; online it tries one, with its bounded
    timeout, and no download (checked by what it calls, not by a clock)."""
    import socket

    import huggingface_hub

    from core.models.sources import check_spec
    from core.models.specs import loading_note

    tried: list[float | None] = []

    def connect(address, timeout=None, *args, **kwargs):
        tried.append(timeout)
        raise OSError("unreachable")

    def download(*args, **kwargs):
        raise AssertionError("a download was tried")

    monkeypatch.setattr(socket, "create_connection", connect)
    for name in ("hf_hub_download", "snapshot_download"):
        monkeypatch.setattr(huggingface_hub, name, download)
    with pytest.raises(ValueError, match=r"HF_HUB_OFFLINE"):
        check_spec("no-such-org/no-such-model")
    assert tried == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    with pytest.raises(ValueError, match=r"cannot be reached from this machine, so it cannot be downloaded; the "
                                         r"built-in specs, which need no download: smollm2-135m-instruct, "
                                         r"synthetic:smollm2-135m, .*tiny-random$"):
        check_spec("no-such-org/no-such-model")
    assert len(tried) == 1 and tried[0] is not None and tried[0] <= 3.0
    assert "GGUF" not in loading_note("no-such-org/no-such-model") and "GGUF" in loading_note("smollm2-135m-instruct")


@pytest.mark.parametrize("spec", ["x" * 5000, "/tmp/" + "a" * 300, "tiny-random:" + "b" * 300, "c" * 300])
def test_a_long_spec_is_one_readable_line_never_an_oserror(spec):
    from core.models.sources import check_spec

    with pytest.raises(ValueError) as refused:
        check_spec(spec)
    assert len(str(refused.value)) < 500 and spec[:81] not in str(refused.value)


def test_a_remote_code_directory_is_refused_by_the_cheap_check(tmp_path):
    from core.models.sources import check_spec

    (tmp_path / "config.json").write_text('{"model_type": "my-custom", "auto_map": {"AutoModelForCausalLM": "m.M"}}')
    with pytest.raises(ValueError, match="needs custom code from its repository"):
        check_spec(str(tmp_path))
    (tmp_path / "config.json").write_text('{"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "m.M"}}')
    assert check_spec(str(tmp_path)) == str(tmp_path), "a family transformers knows loads without the remote code"


def test_a_config_json_of_a_gigabyte_is_refused_by_its_size_without_being_read(tmp_path):
    from core.models.memory import spec_shape
    from core.models.sources import check_spec

    with open(tmp_path / "config.json", "wb") as handle:
        handle.truncate(2**30)  # sparse: a gigabyte of zeros that costs no disk
    with pytest.raises(ValueError, match=r"its config\.json cannot be read \(the file is 1,024\.00 MiB, more than a "
                                         r"config\.json here may hold \(16 MiB\)\)") as refused:
        check_spec(str(tmp_path))
    assert "\n" not in str(refused.value) and spec_shape(str(tmp_path)) is None
