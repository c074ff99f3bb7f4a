"""What a part's process imports before its work, by list (parts/__init__.py names each part's):
timed on its own in every part (the report's `phases`) and in fresh processes by cold_start.py,
which plan.py's estimates take their imports from. Imports nothing, so both can read it."""
from __future__ import annotations

# torch, and transformers' LLaMA (transformers imports a model's code at its first use)
TORCH = ("torch", "transformers", "transformers.models.llama.modeling_llama")
# a random LLaMA behind the package's backend
MODEL = TORCH + ("seakr_repro.llm.hf.backend", "seakr_repro.doubles.random_llama")
# the run layer on the profile's inputs: the grid, the methods, bm25s retrieval, spaCy
PIPELINE = MODEL + ("seakr_repro.runs.grid", "seakr_repro.runs.inputs", "seakr_repro.steps.prepare",
                    "seakr_repro.artifacts", "seakr_repro.methods.dragin", "seakr_repro.methods.seakr.method",
                    "seakr_repro.retrieval.bm25s_backend", "bm25s", "Stemmer", "spacy")
LISTS = {"TORCH": TORCH, "MODEL": MODEL, "PIPELINE": PIPELINE}
