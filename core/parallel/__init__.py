"""Tensor parallelism and the processes it needs: the process group and the sharded model (tensor_parallel), one
spawned process per rank for `core.bench --tp N` (ranks), and what every spawned process shares (launch).

engine/ imports these; nothing in core imports engine/.
"""
