"""What makes a decode step fewer and fuller kernels: compiled decode attention (attention, and triton_attention with
its Triton kernels in triton_decode_kernels), fused projections (fusion), programmatic dependent launch (pdl), and
under tensor parallelism the all-reduce fused with the residual add and RMSNorm (tp_fusion, with its Triton kernels
in tp_kernels). Imports run one way: tp_fusion imports fusion, fusion imports attention, and none imports back."""
