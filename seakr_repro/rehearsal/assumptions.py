"""The rehearsal's assumptions about the GPU machine it is lent, in one place.

The rehearsal is written for a machine lent for minutes through a tool that runs one command at a
time over a copy of the checkout: what that tool allows decides how much one call may do, what it
may carry there and what may come back. When the lender's terms change, change them here; the
plan of the one call (plan.py), the pack's size check (pack.py) and the report folder (driver.py)
follow from these names.
"""
from __future__ import annotations

# time
SECONDS_PER_CALL = 600          # the most one command may run (the device tool's timeout_s)
DEVICE_SECONDS = 15 * 60        # a session's device time: every machine start, idle wait and call counted
MACHINE_START_SECONDS = 120     # starting a machine: "a minute or more", "1 to 2 minutes"; the plan takes the slow end
WARM_SECONDS = 30               # how long a machine stays after a call before it goes back

# what travels there, and what comes back
CARRIED_MIB = 64                # the checkout's files (tracked, and untracked ones git does not ignore) + carried paths
FILES_BACK = 8                  # files that come back from the call's output folder
FILE_BACK_MIB = 16              # each of them at most
BACK_MIB = 64                   # all of them together
FOLDERS_DOWN = 2                # $OUT/a/b/file comes back, $OUT/a/b/c/file does not

# the machine: one H100 or H200, its own Python and packages, no network
PYTHON = "3.12"                 # its python3, the one holding its torch: the pack's wheels are for it
# What its image holds of what the rehearsal imports; the rest travels in the pack
# (scripts/gpu_rehearsal_packages.txt, scripts/gpu_rehearsal_ray.txt), or is NOT_THERE: neither on
# the image nor packed (vLLM; pyserini, which needs Java; papermill): env lists them as not
# importable, and nothing the rehearsal runs needs them.
NOT_THERE = ("vllm", "pyserini", "papermill")
IMAGE_PACKAGES = ("torch", "transformers", "tokenizers", "safetensors", "accelerate", "numpy", "pandas",
                  "scipy", "scikit-learn", "PyYAML", "tabulate", "tqdm", "threadpoolctl", "pytest",
                  "nvidia-ml-py", "jax", "click", "filelock", "msgpack", "packaging", "protobuf",
                  "requests", "attrs", "typing-extensions")
