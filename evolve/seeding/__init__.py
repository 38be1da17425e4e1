"""Seeding: Inductor's code for a problem turned into a first kernel.

``inductor`` captures what torch.compile writes for a problem (with ``conv_forms``
and ``symbolic`` giving it forms it can compile with symbolic sizes), ``seed``
turns that into candidate files (``kevo seed``, ``seeds: compile``), ``apart``
runs a capture in a child process for a sweep's runs, and ``room`` lets a
capture that ran out of device memory wait for room. Nothing here imports
``evolve.models``.
"""
