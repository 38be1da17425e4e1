"""The boundary: the sandbox line itself, and what may cross it.

``screen`` (the static screen: what a candidate's source may not contain
before it crosses), ``sandbox`` (the worker process seen from the trusted
side: start, talk, kill), ``confine`` (the operating system's confinement of
that process, run as a script before it becomes the worker), ``protocol``
and ``messages`` (every judge<->worker step and reply as a typed message),
``wire`` (the bytes on the pipe: JSON and shared memory, never pickle),
``keys`` (which environment variables hold a secret: kept from the worker, and
from Ray's actors by evolve.dispatch.connect).

Both sides import it. It may import fitness.problems (a step carries a
``Probe``) and fitness's shared modules (result, settings, refusal); never
fitness.worker, fitness.judge or fitness.profiling.
"""
