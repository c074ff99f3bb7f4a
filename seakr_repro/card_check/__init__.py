"""The card check (`python -m seakr_repro check-card`): does a profile fit this GPU, how fast does
it go here, what would it cost; and what a lent GPU machine runs for this package in one call.

- check.py: the command, its one process of parts, the paragraph, the measured paces' rows;
- parts.py: the parts in their order (SeaKR first, then every method's peak, the decode paths'
  pace, the out-of-memory retry); plan.py: their estimates, the margin rule, the one GPU call;
- card.py: the card (a CUDA GPU, or the simulated card on a CPU): its cap and peaks;
- stand_ins.py: random-weight models and the profile on stand-in data;
- peak_prediction.py, predict_peaks.py: each method's peak at LLaMA-2-7B's shape, predicted;
- pack.py: what the GPU call carries (scripts/gpu_check_pack.sh) and the commit it names.
"""
