"""A run's memory on the card by kind, and how each kind scales from one LLaMA shape to another: how
the simulated card predicts, from a run at a small shape, the peak at LLaMA-2-7B's shape
(docs/measurements.md, "Each method's peak at LLaMA-2-7B's shape, predicted").

A narrow run with the target's layer count, vocabulary and dtype holds at every moment the
tensors the target run holds, narrower in their width dimensions only, so each tensor's bytes
scale by the ratio of those dimensions, told from its shape and dtype (`kind_of`):

  weights  the parameters                               the target's parameter bytes
  vocab    last dimension the vocabulary (logits,       vocabulary
           the sampler's rows)
  heads    last dimension the head dim, a head count    heads x head dim (keys and values of
           among the others                             prompts, rows, prefix caches; q, k, v)
  scores   a head count in its first two dimensions,    heads (attention scores, one layer's)
           not per head dim
  hidden   last dimension the hidden size               hidden size
  mlp      last dimension the intermediate size         intermediate size
  other    the rest (token ids, positions, masks)       unchanged

`scales` refuses another layer count. The prediction is the largest, over the run, of the live
bytes so scaled (`scaled_total`), not the measured peak scaled: the moment the small shape's
vocabulary dominates is not the one that dominates at 7B.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

KINDS = ("weights", "vocab", "heads", "scores", "hidden", "mlp", "other")


@dataclass(frozen=True)
class Dims:
    """A LLaMA-family model's dimensions and the bytes per value of its dtype."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    bytes_per_value: int
    head_dim: int = 0

    def __post_init__(self):
        if not self.head_dim:
            object.__setattr__(self, "head_dim", self.hidden // self.heads)

    @classmethod
    def of(cls, config, bytes_per_value: int) -> "Dims":
        """From a transformers LlamaConfig (or any object with its attribute names)."""
        return cls(config.num_hidden_layers, config.hidden_size, config.intermediate_size,
                   config.num_attention_heads, config.num_key_value_heads or config.num_attention_heads,
                   config.vocab_size, bytes_per_value, getattr(config, "head_dim", None) or 0)

    @classmethod
    def shape(cls, spec: dict, vocab: int, bytes_per_value: int) -> "Dims":
        """From a `doubles.random_llama.SHAPES` entry (LlamaConfig's keyword names)."""
        return cls(spec["num_hidden_layers"], spec["hidden_size"], spec["intermediate_size"],
                   spec["num_attention_heads"], spec.get("num_key_value_heads") or spec["num_attention_heads"],
                   vocab, bytes_per_value)

    def parameters(self) -> int:
        """LlamaForCausalLM's parameter count (embedding and LM head untied, RMSNorm weights)."""
        d, kv = self.hidden, self.kv_heads * self.head_dim
        attention = d * self.heads * self.head_dim * 2 + d * kv * 2
        layer = attention + 3 * d * self.intermediate + 2 * d
        return self.layers * layer + 2 * self.vocab * d + d

    def weight_bytes(self) -> int:
        return self.parameters() * self.bytes_per_value

    def kv_bytes_per_token(self) -> int:
        """Keys and values of one token in every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.bytes_per_value

    def at(self, spec: dict) -> "Dims":
        """These dims with another shape's widths and layers (the vocabulary and dtype kept)."""
        other = Dims.shape(spec, self.vocab, self.bytes_per_value)
        return replace(self, layers=other.layers, hidden=other.hidden, intermediate=other.intermediate,
                       heads=other.heads, kv_heads=other.kv_heads, head_dim=other.head_dim)


def kind_of(shape: tuple[int, ...], floating: bool, dims: Dims) -> str:
    """The kind (KINDS, weights aside) of a tensor of `shape` in a run of a model of `dims`."""
    if not floating or not shape:
        return "other"
    last, heads = shape[-1], {dims.heads, dims.kv_heads}
    if last == dims.vocab:
        return "vocab"
    if len(shape) >= 3 and last == dims.head_dim and heads & set(shape[:-1]):
        return "heads"
    if last == dims.hidden:
        return "hidden"
    if last == dims.intermediate:
        return "mlp"
    if len(shape) >= 3 and heads & set(shape[:2]):
        return "scores"
    return "other"


def scales(small: Dims, target: Dims) -> dict[str, float]:
    """Each kind's factor from a run at `small` to the same run at `target`."""
    if small.layers != target.layers:
        raise ValueError(f"a run at {small.layers} layers predicts runs at {small.layers} layers only, not "
                         f"{target.layers}: measure at the target's layer count (its caches grow with it)")
    return {"weights": target.weight_bytes() / small.weight_bytes(), "vocab": target.vocab / small.vocab,
            "heads": target.heads * target.head_dim / (small.heads * small.head_dim),
            "scores": target.heads / small.heads, "hidden": target.hidden / small.hidden,
            "mlp": target.intermediate / small.intermediate, "other": 1.0}


def scaled_total(live: dict[str, int], factors: dict[str, float]) -> int:
    """The bytes live by kind at the small shape, as they would be at the target."""
    return int(sum(b * factors[k] for k, b in live.items()))
