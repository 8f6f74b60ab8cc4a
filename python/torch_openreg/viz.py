"""``python -m torch_openreg.viz``: draws openreg's timelines and memory snapshots as pictures that open
offline (torch.openreg.viz; ``--help`` for the commands)."""

import sys

from torch_openreg.openreg.viz._cli import main

if __name__ == "__main__":
    sys.exit(main())
