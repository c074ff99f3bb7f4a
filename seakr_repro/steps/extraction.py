"""Step 02: closed-book samples of a calibration set and their forced-EOS vectors at every
layer, stored resumably and read back one (hook, layer) at a time.

The paper tuned its hyper-parameters on NQ-train questions answered closed-book (§5.3, Figure 3).
Here the calibration set is FanOutQA's single-value sub-questions (closed-book, since the package
does not ship their pages) plus the bundled single-hop questions. Each gets a greedy answer
(correct = F1 >= 0.5), k samples with the statistics every estimator of `uncertainty.registry`
needs, and every sample's forced-EOS vector at EVERY layer for both hooks (`llm.hooks`), so that
step 03 calibrates delta on the very U that gates retrieval.

Storage (docs/disk-and-memory.md, "Step 02"): one float16 .npy per question, written atomically
before its JSON line, so a resumed run skips what both hold; `load_extraction` returns a
`VectorStore` that memory-maps them and reads one (hook, layer) at a time, never the whole set."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Sequence

import numpy as np

from ..artifacts import EXTRACTION, table
from ..core.config import Config
from ..core.errors import UserError
from ..core.io import appending, iter_jsonl
from ..core.paths import results_dir
from ..llm.hooks import HOOKS
from ..uncertainty.thresholds import u_layer, u_params

CORRECT_F1 = 0.5        # a closed-book answer counts as correct from this token F1 on


def calibration_records(n_fanout: int | None, n_bundled: int | None, seed: int = 42) -> list:
    """FanOutQA single-value sub-questions + the bundled single-hop set, sampled reproducibly."""
    from ..data.registry import load_dataset
    from ..data.records import sample

    fan = [r for r in load_dataset("fanoutqa-sub") if r.extra.get("single_value") and r.answers]
    records = sample(fan, n_fanout, seed) if n_fanout != 0 else []
    if n_bundled != 0:
        records += load_dataset("bundled-single", n=n_bundled, seed=seed)
    return records


def eos_vectors_all_layers(backend, prompt: str, completions: Sequence[Sequence[int]]) -> dict:
    """{"mlp_out": L x k x d, "residual": L x k x d} float32 vectors at the EOS of "prompt +
    completion + EOS" at every layer; each completion is a sample's forced-EOS sequence minus its
    EOS (`forced_eos_prefixes`). The backend computes them in the very pass its `sample` takes one
    layer's vectors from, so step 03's U is the methods' U."""
    if not hasattr(backend, "eos_vectors_all_layers"):
        raise UserError(f"the {type(backend).__name__} backend cannot give hidden states at every "
                        "layer", setting="model.backend", fix="use model.backend: hf or vllm for step 02")
    return backend.eos_vectors_all_layers(prompt, completions)


def forced_eos_prefixes(samples, eos_token_id: int, mode: str) -> list[list[int]]:
    """Each sample's forced-EOS sequence (`stops.forced_eos_ids`) without its final EOS."""
    from ..llm.stops import forced_eos_of

    return [forced_eos_of(g, eos_token_id, mode)[:-1] for g in samples]


def reasked_answers(backend, prompts: Sequence[str], greedy: Sequence, mode: str) -> list:
    """The extracted answer of each prompt's greedy output, as the methods extract it: a re-ask
    of each output with no answer pattern (the re-asks are independent: one batch, the same tokens
    as one generate each)."""
    from ..evaluation import answer_from_forced, extract_answer
    from ..llm.base import generate_many
    from ..prompts.seakr import simple_qa_stops

    answers = [extract_answer(g.text, mode=mode) for g in greedy]
    again = [i for i, a in enumerate(answers) if a is None]
    forced = generate_many(backend, [prompts[i] + greedy[i].text + " So the answer is " for i in again],
                           max_new_tokens=24, stop=simple_qa_stops())
    for i, f in zip(again, forced):
        answers[i] = answer_from_forced(f.text, mode)
    return answers


def extract_question(backend, record, cfg: Config, n_shot: int) -> tuple[dict, dict]:
    """All step-02 measurements of one question, closed-book: (JSON row, arrays); the row's
    `calls` are the question's model calls, counted as a run's rows count theirs (`price.work`
    reads them)."""
    from ..llm.cache import with_call_counts

    (row, arrays), calls = with_call_counts(backend, lambda: extract_contexts(backend, record, cfg, n_shot, [()])[0])
    return ({**row, "calls": calls} if calls is not None else row), arrays


def extract_contexts(backend, record, cfg: Config, n_shot: int, contexts: Sequence[Sequence[str]],
                     all_layers: Sequence[bool] | None = None) -> list[tuple[dict, dict | None]]:
    """Step 02's measurements of one question in several contexts (`contexts`: the passages
    given with it, () = closed-book), as (JSON row, arrays) per context. The k samples of all
    contexts are drawn in one `sample_many` batch (the same samples as one `sample` call each).
    Every row carries `u`, eigen U at the configured layer and hook; contexts with `all_layers`
    False get no all-layer vectors (arrays None) and no prompt judgement."""
    from .. import uncertainty as unc
    from ..evaluation import exact_match, f1_score
    from ..prompts import demos_for, format_context
    from ..llm.base import generate_and_sample_many
    from ..llm.sampling_settings import Sampling
    from ..prompts.seakr import build_prompt, simple_qa_stops
    from ..uncertainty import registry

    all_layers = [True] * len(contexts) if all_layers is None else list(all_layers)
    # SeaKR's simple-QA prompt with the profile's examples (prompts.demos: official = the code's)
    demos = demos_for("bundled-single", n_shot, cfg.get("prompts.demos", "paper"), cfg.get("prompts.official_repo"))
    prompts = [build_prompt(demos, record.question, docs=list(docs)) for docs in contexts]
    layer = u_layer(cfg, backend.n_layers)
    # each context's greedy answer and its k samples in one call (one batch on the transformers
    # backend: the greedy row rides with the samples)
    pairs = generate_and_sample_many(
        backend, prompts,
        generate=dict(max_new_tokens=cfg["seakr.max_new_tokens"], stop=simple_qa_stops(), want_stats=True),
        sample=Sampling(k=cfg["uncertainty.k"], max_new_tokens=cfg["uncertainty.max_tokens"],
                        stop=simple_qa_stops(), temperature=cfg["uncertainty.temperature"],
                        top_k=cfg["uncertainty.top_k"], top_p=cfg["uncertainty.top_p"], seed=cfg["seed"],
                        layer=layer, hook=cfg["uncertainty.hook"], want_stats=True,
                        forced_eos=cfg["uncertainty.forced_eos"]))
    greedies, sets = [g for g, _ in pairs], [ss for _, ss in pairs]
    answered = list(zip(greedies, reasked_answers(backend, prompts, greedies,
                                                  cfg["evaluation.answer_extraction"])))
    eos = backend.eos_token_id
    out = []
    for docs, prompt, (greedy, answer), ss, full in zip(contexts, prompts, answered, sets, all_layers):
        f1 = f1_score(answer or "", record.golds)
        row = {
            "id": record.id, "question": record.question, "golds": record.golds,
            "source": record.source, "n_docs": len(docs),
            "greedy": greedy.text, "answer": answer, "em": exact_match(answer or "", record.golds),
            "f1": f1, "correct": bool(f1 >= CORRECT_F1),
            "samples": [g.text for g in ss.samples],
            "nonempty": [bool(g.text.strip()) for g in ss.samples],
            "prompt_tokens": greedy.n_prompt_tokens,
            # what the estimator registry scores (the same functions the methods' Scorer uses)
            "greedy_stats": registry.to_json(registry.greedy_stats(greedy, eos)),
            "sample_stats": registry.to_json([registry.sample_stats(g, eos) for g in ss.samples]),
        }
        # eigen U at the configured layer and hook, from the samples' own vectors: the U SeaKR's
        # Scorer computes for this context
        row["u"] = registry.score("eigen", registry.stats_from_row(row, ss.vectors), u_params(cfg))
        arrays = None
        if full:
            row["prompt_uncertainty"] = unc.prompt_uncertainty(
                backend, record.question, format_context(list(docs)) if docs else "").uncertainty
            vectors = eos_vectors_all_layers(backend, prompt,
                                             forced_eos_prefixes(ss.samples, eos, cfg["uncertainty.forced_eos"]))
            arrays = {h: v.astype(np.float16) for h, v in vectors.items()}
        out.append((row, arrays))
    return out


def extract_on_worker(worker, model: str, record, n_shot: int) -> tuple[dict, dict]:
    """`extract_question` on a Ray worker (`runs.ray_worker.Worker`): its backend of `model`."""
    return extract_question(worker.backend(model), record, worker.cfg, n_shot)


def extraction_dir(cfg: Config, tag: str | None = None, res: Path | None = None) -> Path:
    """Step 02's folder; another backbone (Table 4) gets its own under 07-backbones/. `res`: the
    profile's results folder to find it in (default: results/<profile>/, created)."""
    # another backend's samples go apart from the transformers backend's (no mixed resume)
    suffix = "" if cfg.get("model.backend", "hf") == "hf" else f"-{cfg['model.backend']}"
    res = results_dir(cfg.profile) if res is None else Path(res)
    if tag is None:
        return res / f"{EXTRACTION}{suffix}"
    return res / table("table4").step / "calibration" / f"{tag}{suffix}"


def run_extraction(backend, records, cfg: Config, n_shot: int, progress: bool = True,
                   tag: str | None = None) -> Path:
    """Extract every record not yet done; one float16 .npy + one JSON line per question. `backend`
    may be a `fleet_backend.FleetBackend` (runner.engine: ray): Ray workers extract, this process
    writes, in the order they finish. A crash mid-question leaves nothing half-written: the .npy
    appears by an atomic rename, the JSON line after it (a torn last line is dropped on resume),
    and a question lacking either is redone."""
    from ..core.progress import tqdm

    out = extraction_dir(cfg, tag)
    (out / "vectors").mkdir(parents=True, exist_ok=True)
    rows_path = out / "questions.jsonl"
    _drop_torn_tail(rows_path)
    done = {row["id"] for _, row in iter_jsonl(rows_path)} if rows_path.is_file() else set()
    todo = [r for r in records if not (r.id in done and vector_path(out, r.id).is_file())]
    if todo:
        from ..core.disk import require_free_space
        need = len(todo) * 2 * len(HOOKS) * backend.n_layers * cfg["uncertainty.k"] * backend.hidden_size
        require_free_space(out, need, f"step 02 ({len(todo)} questions of float16 vectors)")
    fleet = getattr(backend, "fleet", None)      # runner.engine: ray: the workers answer
    if fleet is not None:
        finished = fleet.map([(r.id, ("call", extract_on_worker, backend.model, r, n_shot)) for r in todo])
    else:
        finished = ((r.id, extract_question(backend, r, cfg, n_shot)) for r in todo)
    with appending(rows_path) as append, \
            tqdm(total=len(todo), desc="closed-book samples + EOS vectors", unit="q",
                 disable=not progress, mininterval=2.0) as bar:
        for qid, (row, arrays) in finished:      # this process alone writes, as they finish
            write_vectors(out, qid, arrays)
            if qid not in done:
                append(json.dumps(row, ensure_ascii=False) + "\n")
            bar.update(1)
    return out


def vector_path(out: Path, qid: str) -> Path:
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in qid)
    return Path(out) / "vectors" / f"{safe}.npy"


def write_vectors(out: Path, qid: str, arrays: dict) -> Path:
    """One question's {hook: L x k x d} as one float16 .npy (hooks x L x k x d), atomically."""
    from ..core.io import atomic_open

    stacked = np.stack([np.asarray(arrays[h], dtype=np.float16) for h in HOOKS])
    path = vector_path(out, qid)
    with atomic_open(path, "wb") as fh:     # a handle: np.save would add ".npy" to a temp name
        np.save(fh, stacked, allow_pickle=False)
    return path


def _drop_torn_tail(path: Path) -> None:
    """Cut a last JSON line left without its newline by a crash (its question is redone)."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as fh:
        fh.seek(-1, os.SEEK_END)
        if fh.read(1) == b"\n":
            return
        fh.seek(0)
        data = fh.read()
        fh.truncate(data.rfind(b"\n") + 1)


class VectorStore:
    """The step-02 vectors of `rows`, read one (hook, layer) at a time from per-question memory
    maps: host memory holds one q x k x d float32 layer, not the whole q x 2 x L x k x d set."""

    def __init__(self, out: Path, rows: Sequence[dict]):
        self.out, self.rows = Path(out), list(rows)
        self.paths = [vector_path(self.out, r["id"]) for r in self.rows]
        missing = [p for p in self.paths if not p.is_file()]
        if missing:
            old = missing[0].with_suffix(".npz").is_file()
            raise UserError(
                f"{len(missing)} of {len(self.paths)} questions have no vector file "
                + ("(they are in the old compressed .npz layout, which is no longer read)" if old
                   else "(step 02 was interrupted or its files were deleted)"),
                path=missing[0],
                fix="re-run notebook 02-extract-hidden-states: it redoes exactly the questions "
                    "whose .npy is missing")
        first = np.load(self.paths[0], mmap_mode="r")
        self.n_hooks, self.n_layers, self.k, self.hidden = first.shape
        del first

    def __len__(self) -> int:
        return len(self.rows)

    def layer(self, hook: str, layer: int) -> np.ndarray:
        """q x k x d float32 vectors of one hook at one layer (rows of empty samples included)."""
        if hook not in HOOKS:
            raise UserError(f"unknown hook {hook!r}", setting="hook", fix=f"use one of {HOOKS}")
        if not 0 <= layer < self.n_layers:
            raise UserError(f"layer {layer} outside 0..{self.n_layers - 1}", setting="layer",
                            fix="pick a layer of the extracted model")
        h = HOOKS.index(hook)
        out = np.empty((len(self.paths), self.k, self.hidden), dtype=np.float32)
        for q, path in enumerate(self.paths):
            m = np.load(path, mmap_mode="r")
            if m.shape != (self.n_hooks, self.n_layers, self.k, self.hidden):
                raise UserError(f"vectors of shape {m.shape}, expected "
                                f"{(self.n_hooks, self.n_layers, self.k, self.hidden)}", path=path,
                                fix="delete the file and re-run notebook 02 (the question is redone)")
            out[q] = m[h, layer]
            del m                     # unmap: the page cache, not this process, keeps the bytes
        return out

    def question(self, q: int, hook: str) -> np.ndarray:
        """L x k x d float32 vectors of question q at one hook (one question in memory)."""
        m = np.load(self.paths[q], mmap_mode="r")
        out = np.asarray(m[HOOKS.index(hook)], dtype=np.float32)
        del m
        return out

    def nonempty(self, hook: str, layer: int) -> list[np.ndarray]:
        """Per question, the vectors of its non-empty samples (what U(c) uses) at one layer."""
        v = self.layer(hook, layer)
        return [v[q][np.asarray(r["nonempty"], dtype=bool)] for q, r in enumerate(self.rows)]

    def by_layer(self, hook: str) -> "LayerView":
        """{layer: per-question non-empty vectors}, each layer read only when asked for."""
        return LayerView(self, hook)


class LayerView(Mapping):
    """A lazy Mapping layer -> `VectorStore.nonempty(hook, layer)` (for `quality_vs_layer`)."""

    def __init__(self, store: VectorStore, hook: str):
        self.store, self.hook = store, hook

    def __getitem__(self, layer: int) -> list[np.ndarray]:
        if not isinstance(layer, (int, np.integer)) or not 0 <= layer < self.store.n_layers:
            raise KeyError(layer)
        return self.store.nonempty(self.hook, int(layer))

    def __iter__(self):
        return iter(range(self.store.n_layers))

    def __len__(self) -> int:
        return self.store.n_layers


def load_extraction(cfg: Config, ids: Sequence[str] | None = None,
                    tag: str | None = None) -> tuple[list[dict], VectorStore]:
    """Rows of the extracted questions and their vectors as a `VectorStore` (read per layer)."""
    out = extraction_dir(cfg, tag)
    rows = [row for _, row in iter_jsonl(out / "questions.jsonl", "step-02 results",
                                         "run notebook 02-extract-hidden-states")]
    if ids is not None:
        keep = set(ids)
        rows = [r for r in rows if r["id"] in keep]
    if not rows:
        raise UserError("no extracted questions found", path=out / "questions.jsonl",
                        fix="run notebook 02-extract-hidden-states first")
    return rows, VectorStore(out, rows)
