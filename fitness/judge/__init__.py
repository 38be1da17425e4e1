"""The judge: the trusted side, which reaches a verdict on a candidate.

``evaluator`` (the one entry point), ``channel`` (the evaluator's side of
its worker, one step at a time), ``prepared`` (the problem made ready on a
device: references, held-out shapes, the cutoff check), ``cutoff`` and
``probe_rounding`` (the cutoff derived from the reference's outputs, and on a
probe), ``compare`` (outputs against the reference), ``timing_checks`` and
``window_judge`` (the worker's timings checked; the timed runs judged after
the lane is released), ``lane`` (the device's timing lane), ``memory_plan``
(what an evaluation holds, phase by phase), ``where`` (where a check ran, as
a reason says it), ``ahead`` (a candidate's kernels compiled before it holds
memory), ``incumbent`` (torch.compile of the reference, timed by the same
clock), ``floor`` and ``sol`` (the speed of light).

May import fitness.boundary, fitness.problems, fitness.profiling and fitness's
shared modules (result, settings, refusal). Never fitness.worker: the judge
talks to the worker only through the boundary.
"""
