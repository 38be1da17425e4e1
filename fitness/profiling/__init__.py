"""Profiling: a candidate run under a hardware profiler, and the work a forward must do.

``candidate`` (``profile_candidate``: the target program under ncu or
rocprof, in the worker's environment; the work a forward must do), ``shape``
(the shape a parent is profiled at: its own, or a reduced one),
``target`` (the program the profiler wraps, run as
``python -m fitness.profiling.target``).

May import fitness.boundary (the worker's scrubbed environment),
fitness.problems and fitness's shared modules (result, settings, refusal);
never fitness.worker or fitness.judge. The judge imports it (a parent's
profile, a problem's work for its floor).
"""
