"""One estimator registry: step 03 calibrates delta on exactly the U that gates SeaKR's retrieval,
and the paper profile keeps the official delta -6 whatever step 03 wrote."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from seakr_repro import artifacts
from seakr_repro.runs import grid
from seakr_repro.uncertainty import thresholds
from seakr_repro.steps import estimators, extraction
from seakr_repro.core.config import load_config
from seakr_repro.data.records import QuestionRecord
from seakr_repro.core.errors import DataMissingError
from seakr_repro.core.io import write_json
from seakr_repro.llm.base import SampleSet
from seakr_repro.methods.seakr.uncertainty import Scorer
from seakr_repro.uncertainty import registry


class Float16Storage:
    """A backend whose sample vectors pass through float16, as step 02 stores them (one sample
    call per context, as a call cache gives the estimators)."""

    def __init__(self, backend):
        self.inner, self.memo = backend, {}
        self.n_layers, self.eos_token_id, self.name = backend.n_layers, backend.eos_token_id, backend.name

    def sample(self, prompt, settings):
        key = (prompt, settings)
        if key not in self.memo:
            ss = self.inner.sample(prompt, settings)
            self.memo[key] = SampleSet(ss.samples, ss.vectors.astype(np.float16).astype(np.float32),
                                       ss.layer, ss.hook)
        return self.memo[key]

    def sample_many(self, prompts, settings):
        return [self.sample(p, settings) for p in prompts]

    def __getattr__(self, attr):
        return getattr(self.__dict__["inner"], attr)


def test_step03_calibrates_on_the_u_seakr_computes_bit_for_bit():
    from seakr_repro.llm.hf.backend import HFBackend
    from seakr_repro.llm.registry import model_dir
    from seakr_repro.prompts import demos_for
    from seakr_repro.prompts.seakr import build_prompt, simple_qa_stops

    torch.set_num_threads(1)
    backend = HFBackend.from_dir(model_dir("smollm2-135m-instruct"), name="smollm2-135m-instruct")
    # not the defaults: the configured layer, hook, variant and forced-EOS rule must reach both
    cfg = load_config("smoke", overrides={"uncertainty.layer": 5, "uncertainty.hook": "residual",
                                          "uncertainty.variant": "inside",
                                          "uncertainty.forced_eos": "replace_last",
                                          "uncertainty.max_tokens": 8, "seakr.max_new_tokens": 12})
    record = QuestionRecord(id="q1", question="Who wrote the play Hamlet?", answers=["William Shakespeare"])
    row, arrays = extraction.extract_question(backend, record, cfg, n_shot=2)
    stored = arrays["residual"][5].astype(np.float32)           # k x d, as step 03 reads it
    step03 = estimators.estimator_scores([row], [stored], estimators.u_params(cfg))

    prompt = build_prompt(demos_for("bundled-single", 2), record.question)
    greedy = backend.generate(prompt, max_new_tokens=cfg["seakr.max_new_tokens"], stop=simple_qa_stops(),
                              want_stats=True)
    settings = grid.method_settings(cfg, "seakr", {})
    seen, storage = [], Float16Storage(backend)
    for name in registry.ESTIMATORS:
        scorer = Scorer(storage, {**settings, "estimator": name}, record.question)
        u = scorer(prompt, simple_qa_stops(), greedy)
        seen.append(name)
        assert u == step03[name][0], name                      # bit-identical, every estimator
    assert set(seen) == set(step03)
    # and the eigen U really is the configured one: INSIDE's variant on the residual stream
    keep = [s["nonempty"] for s in row["sample_stats"]]
    from seakr_repro.uncertainty import eigen_score
    assert step03["eigen"][0] == eigen_score(stored[np.asarray(keep)], 1e-3, variant="inside")


def _fake_delta(tmp_path, monkeypatch, deltas):
    monkeypatch.setattr(thresholds, "results_dir", lambda p: tmp_path / p)
    write_json(tmp_path / "paper" / "calibration" / "delta.json", {"model": "x", "deltas": deltas})
    write_json(tmp_path / "default" / "calibration" / "delta.json", {"model": "x", "deltas": deltas})


def test_the_paper_profiles_delta_is_minus_6_after_notebook_03_has_run(tmp_path, monkeypatch):
    _fake_delta(tmp_path, monkeypatch, {"eigen": -5.2, "perplexity_official": 4.0})
    paper = load_config("paper")
    deltas = thresholds.read_deltas(paper)
    assert deltas["eigen"] == -6.0                       # the official scripts' fixed threshold
    assert deltas["perplexity_official"] == 4.0          # no official value: step 03's
    assert grid.method_settings(paper, "seakr", deltas)["delta"]["eigen"] == -6.0
    # the calibrated delta is its own Table 3 row
    row = grid.row_overrides(paper, artifacts.ABLATIONS["calibrated-delta"])
    assert row["delta"]["eigen"] == -5.2
    # the default profile (another model) uses its calibrated delta
    assert thresholds.read_deltas(load_config("default"))["eigen"] == -5.2


def test_before_notebook_03_the_calibrated_row_is_skipped_and_eigen_is_the_profiles(tmp_path, monkeypatch):
    monkeypatch.setattr(thresholds, "results_dir", lambda p: tmp_path / p)
    assert thresholds.read_deltas(load_config("default")) == {"eigen": -6.0}
    with pytest.raises(DataMissingError, match="notebook 03"):
        grid.row_overrides(load_config("paper"), artifacts.ABLATIONS["calibrated-delta"])


def test_ablations_run_faithful_and_fixed_seakr_in_every_profile():
    for profile in ("smoke", "default", "paper"):
        cfg = load_config(profile)
        base = grid.method_settings(cfg, "seakr", {"eigen": -6.0})
        faithful = {**base, **artifacts.ABLATIONS["faithful"]}
        fixed = {**base, **artifacts.ABLATIONS["fixed"]}
        assert (faithful["mode"], faithful["forced_eos"]) == ("faithful", "replace_last")
        assert (fixed["mode"], fixed["forced_eos"]) == ("fixed", "append")
    paper = grid.method_settings(load_config("paper"), "seakr", {})
    assert (paper["mode"], paper["forced_eos"]) == ("faithful", "replace_last")
    default = grid.method_settings(load_config("default"), "seakr", {})
    assert (default["mode"], default["forced_eos"]) == ("fixed", "append")
    assert load_config("paper")["model.dtype"] == "float16"
    # every estimator row names a registered estimator
    for over in artifacts.ABLATIONS.values():
        if "estimator" in over:
            registry.get(over["estimator"])


def test_estimator_scores_needs_rows_from_the_current_step02():
    with pytest.raises(Exception, match="notebook 02"):
        estimators.estimator_scores([{"id": "old", "greedy_logprobs": []}], None, {"alpha": 1e-3, "variant": "seakr"})
