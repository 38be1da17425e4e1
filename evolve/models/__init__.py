"""Models: whole models taken apart into problems, and put back with the kernels found.

``model`` captures a model's graph under torch.compile and profiles it,
``fusion`` cuts the graph into regions, ``regions`` writes a region as a
KernelBench problem, ``extract`` and ``manifest`` are ``kevo extract``;
``apply``, ``compiled`` and ``choose`` are ``kevo apply`` (the kernels back in
the model, eagerly and under torch.compile). Nothing here imports
``evolve.seeding``.
"""
