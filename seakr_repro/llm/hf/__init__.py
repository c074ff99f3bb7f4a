"""The transformers backend and its shared-prefix attention."""
