"""What makes a decode step fewer and fuller kernels: compiled decode attention (attention, triton_attention), fused
projections (fusion), programmatic dependent launch (pdl), and under tensor parallelism the all-reduce fused with
the residual add and RMSNorm (tp_fusion, with its Triton kernels in tp_kernels)."""
