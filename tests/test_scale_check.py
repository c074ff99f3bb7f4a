"""`make scale-check` at smoke size: the synthetic backend drives the paper profile's code, and
the report holds every measurement and the arithmetic."""
import json

from seakr_repro.runs import inputs
from seakr_repro.benchmarks import scale_check
from seakr_repro.llm.base import Backend
from seakr_repro.llm.registry import synthetic_backend
from seakr_repro.llm.synthetic import synthetic_passages
from seakr_repro.llm.sampling_settings import Sampling


def test_synthetic_backend_is_a_deterministic_llama_shaped_backend():
    b = synthetic_backend("synthetic-llama-2-7b")
    assert isinstance(b, Backend) and (b.n_layers, b.hidden_size) == (32, 4096)
    g = b.generate("Q: x\nA:", max_new_tokens=50, stop=["\n"], want_stats=True, want_attention=True)
    assert g == b.generate("Q: x\nA:", max_new_tokens=50, stop=["\n"], want_stats=True, want_attention=True)
    assert len(g.tokens) == len(g.logprobs) == len(g.entropies) == len(g.attention) <= 50
    texts = [b.generate(f"q{i}", max_new_tokens=100).text for i in range(40)]
    assert 3 < sum("So the answer is" in t for t in texts) < 30
    ss = b.sample("p", Sampling(k=20, max_new_tokens=30, layer=15))
    assert ss.vectors.shape == (20, 4096) and len(ss.samples) == 20
    from seakr_repro.uncertainty import u_from_sampleset
    us = [u_from_sampleset(b.sample(f"p{i}", Sampling(k=20, max_new_tokens=30))) for i in range(20)]
    assert min(us) < -6 < max(us)                     # both of SeaKR's branches are exercised
    v = b.eos_vectors_all_layers("p", [[5, 6]] * 3)
    assert v["mlp_out"].shape == v["residual"].shape == (32, 3, 4096)
    assert b.score("p", " a b").logprobs and b.count_tokens("a b\nc") == 3
    p = list(synthetic_passages(3))
    assert p == list(synthetic_passages(3)) and len(p[0]["contents"].split("\n", 1)[1].split()) == 100


def test_step03_child_reads_a_paper_shaped_store_layer_by_layer(tmp_path):
    rows = scale_check.write_synthetic_store(tmp_path, 2)
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = scale_check._child_step03(tmp_path, n_boot=5)
    assert got["questions"] == 2 and got["rss_bytes"] > 0
    # LLaMA-2-7B's question: 10,485,888 bytes (docs/disk-and-memory.md, "Step 02")
    assert (tmp_path / "vectors" / "q1.npy").stat().st_size == 10_485_888


def test_extrapolation_is_per_unit_arithmetic():
    m = {"index": {"passages": 1000, "index_bytes": 500_000, "corpus_bytes": 700_000,
                   "index_passages_per_s": 1000.0},
         "runs": {"methods": {"seakr": {"wall_s_per_q": 2.0, "cache_bytes_per_q": 1000,
                                        "run_file_bytes_per_q": 100}},
                  "step02": {"vector_bytes_per_q": 10 * 1024 ** 2}},
         "step03": {"sizes": [{"questions": 100, "rss_bytes": 1_000_000_000},
                              {"questions": 200, "rss_bytes": 1_100_000_000}]}}
    ex = scale_check.extrapolate(m)
    assert ex["index_build_hours"] == 5.84                 # 21,015,324 passages at 1,000 a second
    # SeaKR runs every paper set: 43,215 questions at 2 s each
    assert ex["python_overhead_hours_per_method"]["seakr"] == 24.01
    assert ex["step03_rss_bytes_per_question"] == 1_000_000  # 100 more questions, 100 MB more
    assert ex["step03_rss_gib_at_1788"] == 2.5             # 1.1 GB at 200, 1 MB each beyond


def test_scale_check_end_to_end_at_smoke_size(tmp_path, capsys, monkeypatch):
    # ~30 s: a 200-passage Lucene index and three child processes, as `make scale-check` runs.
    # Real dev sets where the user keeps them must not be read: their questions have no hit in the
    # synthetic corpus (Self-RAG once crashed on that); the paper profile's own paths are used.
    from pathlib import Path
    fixtures = Path(__file__).parent / "fixtures" / "datasets"
    monkeypatch.setenv("SEAKR_RAW_DIR", str(fixtures))        # dev sets in the official layouts
    out = tmp_path / "scale.json"
    # a nearly full disk: 150 MiB free is room enough for a run that writes some 30 MB
    from seakr_repro.core import disk
    monkeypatch.setattr(disk, "free_bytes", lambda path: 150 << 20)
    assert scale_check.main(["--passages", "200", "--questions", "1", "--calibration", "1",
                             "--vector-questions", "2", "--n-boot", "5", "--methods", "cot", "self_rag",
                             "seakr", "--workdir", str(tmp_path / "work"), "--out", str(out)]) == 0
    m = json.loads(out.read_text())
    assert m["index"]["indexed"] == 200 and m["index"]["index_passages_per_s"] > 0
    assert m["index"]["scheme"] == "es_best_fields"
    assert json.loads((tmp_path / "work" / "index" / "index_meta.json").read_text())["scheme"] == "es_best_fields"
    assert m["runs"]["paper_paths"] == {"scheme": "es_best_fields", "demos": "official",
                                        "simple_qa_passages": "official", "questions": "synthetic"}
    assert set(m["runs"]["methods"]) == {"cot", "self_rag", "seakr"}
    assert not any(v["skipped"] for v in m["runs"]["methods"].values())
    seakr = m["runs"]["methods"]["seakr"]
    assert seakr["questions"] == 6 and seakr["llm_calls_per_q"] > 1 and seakr["cache_bytes_per_q"] > 0
    runs = tmp_path / "work" / "results" / "paper" / "runs"
    rows = [json.loads(line) for f in runs.glob("*/*.jsonl") for line in f.read_text().splitlines()]
    assert rows and all(r["id"].startswith("synthetic-") for r in rows)
    # simple QA read the stand-in top-10 file (passages 0-9), not a BM25 search of the corpus
    nq = [json.loads(line) for f in runs.glob("nq/seakr-*.jsonl") for line in f.read_text().splitlines()]
    seen = {h["id"] for r in nq for t in r["trace"] for h in t.get("hits", [])}
    assert seen and seen <= {str(i) for i in range(10)}
    # step 02's file per question at LLaMA-2-7B's shape, as the test above writes it
    assert m["runs"]["step02"]["vector_bytes_per_q"] == 10_485_888
    assert [s["questions"] for s in m["step03"]["sizes"]] == [1, 2]
    ex = m["extrapolation"]
    assert ex["note"].startswith("arithmetic") and ex["index_build_hours"] > 0
    assert set(ex["python_overhead_hours_per_method"]) == {"cot", "self_rag", "seakr"}
    # one source for the paper corpus's size: disk_needs, as docs/disk-and-memory.md's table and preflight
    from seakr_repro.core.config import load_config
    from seakr_repro.runs import disk_needs
    monkeypatch.setattr(inputs, "CACHE_DIR", tmp_path / "no-cache")
    needs = disk_needs.estimate_needs(load_config("paper"))
    assert ex["corpus_jsonl_gib"] == round(needs["corpus_jsonl"] / 1024 ** 3, 1)
    assert ex["index_gib"] == round(needs["index"] / 1024 ** 3, 1)
    assert ex["synthetic_corpus_bytes_per_passage"] > 1000        # the text is kept twice
    printed = capsys.readouterr().out
    assert "MEASURED" in printed and "ARITHMETIC" in printed


def test_the_free_space_margin_grows_with_the_estimate_above_a_floor():
    """What the check's estimate leaves out (merge segments, caches, scratch files) grows with the
    work: the margin never shrinks as the estimate grows and at scale it keeps growing, not a fixed
    amount; a tiny run still gets the floor."""
    estimates = [0, 1 << 20, 30_000_000, 1 << 30, 10 << 30, 100 << 30, 2_500_000_000_000]
    margins = [scale_check.free_space_margin(e) for e in estimates]
    floor = margins[0]
    assert floor > 0 and all(m >= floor for m in margins)
    assert margins == sorted(margins)                          # never less for more work
    assert margins[-1] > margins[-2] > margins[-3] > floor     # still growing at scale
    for args in ((200, 2, 1), (1_000_000, 100, 10)):
        written = scale_check.written_bytes(*args)
        assert scale_check.free_space_needed(*args) >= written + floor
    # more passages, vectors or calibration questions never ask for less
    base = scale_check.free_space_needed(1000, 10, 1)
    assert all(scale_check.free_space_needed(*a) > base for a in ((2000, 10, 1), (1000, 20, 1), (1000, 10, 2)))


def test_the_free_space_check_lets_a_small_run_onto_a_nearly_full_disk(monkeypatch):
    """A disk with 100 MiB free runs the smoke-size check; one with what a two-million-passage
    check writes and 1 GiB more does not run that check."""
    import pytest

    from seakr_repro.core import disk
    from seakr_repro.core.errors import UserError

    monkeypatch.setattr(disk, "free_bytes", lambda path: 100 << 20)
    disk.require_free_space("/tmp", scale_check.free_space_needed(200, 2, 1), "the scale check")
    big = (2_000_000, 100, 10)
    monkeypatch.setattr(disk, "free_bytes", lambda path: scale_check.written_bytes(*big) + (1 << 30))
    with pytest.raises(UserError, match="needs about"):
        disk.require_free_space("/tmp", scale_check.free_space_needed(*big), "the scale check")
