#!/usr/bin/env python3
"""Time every cudakit variant against CuPy and the measured ceilings: `python bench.py --help`."""
import sys

if __name__ == "__main__":
    try:
        from cudakit.bench.cli import main
    except ImportError as exc:
        sys.exit(f"bench.py cannot import cudakit ({exc}); run it from the repository root or pip install -e .")
    sys.exit(main())
