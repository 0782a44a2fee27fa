"""Under load: many requests of different lengths sharing one decode step (continuous batching), each stopping on its
own, a waiting request taking a finished one's slot; the naive and the pipelined loop side by side on the same
workload, transformers' own continuous batching beside them, and the loop that never checks as the ceiling.

- the workload (the requests' prompts, output lengths and arrivals, seeded) and what a run under load asks for are
  core.request's (load, load_schema, workload), torch-free;
- slots: B rows of one static cache, each with its own position, and the batched decode step that moves them on;
- batching: the loops over the slots (how the host learns which rows finished is all that differs between them);
- hf_batching: transformers' `generate_batch` machinery (ContinuousBatchingManager) as a contestant;
- protocol: the contestants on one workload (warm-up, trials, identity against solo decoding, the audit, the
  kernel measurement) and the sweeps over the batch and the arrival rate; its report's `load` section.
"""
