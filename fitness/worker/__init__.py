"""The worker: what runs in the sandboxed process, beside the candidate's code.

It runs candidates and never judges them: ``harness`` (the process's state
and its steps by a table; ``python -m fitness.worker`` runs its ``main``),
``load_step`` (a candidate imported and built; its kernels compiled ahead),
``timed_step`` (a window of timed runs), ``loan`` (the timing lane lent out
while Triton compiles), and the runtime defences that live in the process:
``guard`` (what the candidate's code may call), ``compile_watch`` (candidate
code running while a compile has the lane), ``instrument`` (launch and thread
counters, the watch on what the worker relies on), ``trace`` (the dispatch
trace of a forward).

May import: fitness.boundary (the protocol, the wire, the screen's lists, what
confines it), fitness.problems (the problem it builds inputs for), and
fitness's shared modules (result, settings, refusal). Never fitness.judge or
fitness.profiling: no reference output, no verdict and no judge's code is in
this process. ``tests/test_architecture.py`` pins the modules a fresh
``python -m fitness.worker`` holds.
"""
