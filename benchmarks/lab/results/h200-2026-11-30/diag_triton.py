"""Where the Triton decode attention fails on the GPU: plain launch, eager op, compiled op; each traceback's tail."""
import traceback
import torch
from core.triton_attention import run_kernels_directly, triton_decode_attention
from core.attention import grouped_decode_attention

def case():
    q = torch.randn(1, 16, 1, 128, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(1, 4, 512, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    m = torch.zeros(1, 1, 1, 512, dtype=torch.bool, device="cuda"); m[..., :300] = True
    return q, k, v, m

q, k, v, m = case()
ref = grouped_decode_attention(q, k, v, m, None)
import triton; print("triton", triton.__version__, "torch", torch.__version__)
for name, fn in [("direct split", lambda: run_kernels_directly(q, k, v, m, 128 ** -0.5)),
                 ("direct one", lambda: run_kernels_directly(q, k, v, m, 128 ** -0.5, split_keys=512)),
                 ("eager op", lambda: triton_decode_attention(q, k, v, m, None)),
                 ("compiled op", lambda: torch.compile(triton_decode_attention, dynamic=False)(q, k, v, m, None)),
                 ("compiled op no mask", lambda: torch.compile(triton_decode_attention, dynamic=False)(q, k, v, None, None))]:
    try:
        out = fn(); torch.cuda.synchronize()
        r = ref if "no mask" not in name else grouped_decode_attention(q, k, v, None, None)
        print(name, "OK max err", (out.float() - r.float()).abs().max().item())
    except Exception:
        print(name, "FAILED"); print("".join(traceback.format_exc().splitlines(True)[-25:]))
