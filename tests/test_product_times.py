"""benchmarks/product_times.py: naming each decode step's products by their place in the layer (on the CPU, from a
made-up kernel sequence; the profiled run itself needs a GPU)."""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location(
    "product_times", Path(__file__).resolve().parents[1] / "benchmarks" / "product_times.py")
product_times = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(product_times)
steps_of, table = product_times.steps_of, product_times.table

PREFILL = [("triton_red_fused_norm", 5.0), ("gemv", 250.0)]  # the prefill's last row through the output layer


def _unfused_step(output_layer: float = 248.0) -> list[tuple[str, float]]:
    layer = [("triton_red_norm", 3.0), ("gemv", 12.0), ("triton_poi_rotary", 2.0), ("attend", 4.5),
             ("combine", 1.6), ("gemv", 10.0), ("triton_red_norm", 3.0), ("gemv", 55.0), ("gemv", 33.0)]
    return [("embedding", 1.0), *layer, *layer, ("triton_red_norm", 3.0), ("gemv", output_layer), ("argmax", 1.0)]


def _fused_step() -> list[tuple[str, float]]:
    layer = [("qkv_gemv", 15.0), ("attend", 4.5), ("combine", 1.6), ("gemv", 11.0), ("gemv", 58.0), ("gemv", 34.0)]
    return [("embedding", 1.0), *layer, *layer, ("triton_red_norm", 3.0), ("gemv", 249.0)]


def test_each_product_is_named_by_its_place_after_the_layers_attention():
    steps = steps_of([*PREFILL, *_unfused_step(), *_unfused_step(250.0), *_unfused_step()[:5]])
    assert len(steps) == 2  # the prefill and the last partial step dropped
    roles = table(steps)
    assert roles["q/k/v"] == {"calls": 2, "us_per_step": 24.0, "us_per_call": 12.0}
    assert roles["output"]["us_per_call"] == 10.0 and roles["gate/up"]["us_per_call"] == 55.0
    assert roles["down"] == {"calls": 2, "us_per_step": 66.0, "us_per_call": 33.0}
    assert roles["output layer"]["calls"] == 1 and roles["output layer"]["us_per_step"] == 249.0
    assert roles["combine"]["calls"] == 2


def test_a_fused_layers_q_k_v_is_its_own_kernel():
    roles = table(steps_of([*PREFILL, *_fused_step(), *_fused_step()]))
    assert "q/k/v" not in roles and roles["qkv_gemv"] == {"calls": 2, "us_per_step": 30.0, "us_per_call": 15.0}
    assert roles["gate/up"]["us_per_call"] == 58.0 and roles["output layer"]["us_per_step"] == 249.0
