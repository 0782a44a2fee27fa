"""What makes a decode step fewer and fuller kernels: compiled decode attention (attention, and triton_attention with
its Triton kernels in triton_decode_kernels), fused projections (fusion), the batch-1 products by one kernel of fixed
configurations (products routes them to triton_gemv, its kernel in triton_gemv_kernel), programmatic dependent launch
(pdl), and under tensor parallelism the all-reduce fused with the residual add and RMSNorm (tp_fusion, with its Triton
kernels in tp_kernels). Imports run one way: tp_fusion imports fusion, fusion imports attention and products,
products imports triton_gemv, and none imports back."""
