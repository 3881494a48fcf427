#!/usr/bin/env python3
"""CLI: export a diffusers LTX-Video checkpoint (or the tiny test model) to a vgen package.

    python tools/export_ltx.py --diffusers DIR --out PKG [--dtype float32|float16|bfloat16]
    python tools/export_ltx.py --tiny [--seed N] --out PKG
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vgen_export.export_ltx import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
