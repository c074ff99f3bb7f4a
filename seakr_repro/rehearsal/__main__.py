"""`python -m seakr_repro.rehearsal ...`: the GPU rehearsal's driver (driver.py)."""
import sys

from .driver import main

if __name__ == "__main__":
    sys.exit(main())
