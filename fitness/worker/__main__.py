"""``python -m fitness.worker IN OUT PLATFORM INDEX [LIMIT SPILL SCRATCH]``: the sandboxed worker.

``fitness.boundary.sandbox`` starts it, through ``fitness/boundary/confine.py``
run as a script; ``fitness.worker.harness`` is what it runs.
"""

import sys

from fitness.worker.harness import main

if __name__ == "__main__":
    main(sys.argv[1:])
