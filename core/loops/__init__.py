"""The two decode loops (generation: naive and pipelined, first in the file), the step they share (step), their
input (prompt), and transformers' own generate() as a third contestant (hf_generate)."""
