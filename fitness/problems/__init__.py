"""The problem: a problem file in KernelBench's format, loaded at its shapes, and its inputs.

``problem`` (loading, shape knobs, held-out shapes, the declared cutoff, the
model built and its inputs drawn from a seed), ``probes`` (inputs from a
wider value domain than the problem's own draw).

The worker, the boundary, the judge and profiling all import it; it imports
only fitness's shared modules (result, settings, refusal), never another room.
"""
