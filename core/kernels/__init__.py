"""What makes a decode step fewer and fuller kernels: compiled decode attention (attention, and triton_attention with
its Triton kernels in triton_decode_kernels), fused projections (fusion), the batch-1 products by one kernel of fixed
configurations (products routes them to triton_gemv, its kernel in triton_gemv_kernel), a Llama layer's decode step in
six kernels with the norms, rotary and cache write inside the products (decode_layer), programmatic dependent launch
(pdl), and under tensor parallelism the all-reduce fused with the residual add and RMSNorm (tp_fusion, with its Triton
kernels in tp_kernels). Imports run one way: tp_fusion imports fusion, decode_layer imports fusion, attention,
triton_attention, products and triton_gemv, fusion imports attention and products, products imports triton_gemv, and
none imports back."""
