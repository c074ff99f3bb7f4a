"""Step 08: SeaKR's decisions read back from saved traces, in the style of the paper's Table 5 and
appendix A: the pseudo-generation and U against delta (self-aware retrieval), the candidates ranked by
BM25 and by U (self-aware re-ranking), and the two final answers with their U (self-aware reasoning)."""
from __future__ import annotations

import math

from ..runs.runner import read_results


def _cell(text: str, limit: int = 120) -> str:
    """Text for one Markdown table cell or quote: newlines shown as ⏎, pipes escaped."""
    return (text or "").strip()[:limit].replace("\n", " ⏎ ").replace("|", "\\|")


def _u(x) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else (
        "+inf" if x == math.inf else f"{x:.2f}")


def pick_cases(rows: list[dict], n_each: int = 1) -> dict[str, list[dict]]:
    """Questions that show each decision: retrieval triggered, retrieval skipped, re-ranking that
    overruled BM25, and self-aware reasoning choosing each path."""
    cases: dict[str, list[dict]] = {"retrieval triggered": [], "retrieval skipped": [],
                                    "re-ranking overruled BM25": [], "reasoning chose the knowledge path": [],
                                    "reasoning chose the rationale path": []}
    for row in rows:
        trace = row.get("trace", [])
        pseudo = [t for t in trace if t.get("kind") == "pseudo_step"]
        if any(t.get("retrieve") for t in pseudo):
            cases["retrieval triggered"].append(row)
        if any(not t.get("retrieve") for t in pseudo):
            cases["retrieval skipped"].append(row)
        for t in trace:
            if t.get("kind") == "rerank" and t.get("candidates") and t["candidates"][0]["id"] != t.get("chosen"):
                cases["re-ranking overruled BM25"].append(row)
                break
        chosen = (row.get("extra") or {}).get("choice")
        if chosen in ("knowledge", "rationales"):
            cases[f"reasoning chose the {chosen.rstrip('s')} path"].append(row)
    return {k: v[:n_each] for k, v in cases.items()}


def render_case(row: dict) -> str:
    """One question's SeaKR trace as Markdown."""
    lines = [f"**Question:** {row['question']}  ", f"**Gold:** {' / '.join(row['golds'])}  ",
             f"**SeaKR's answer:** {row['answer']} (F1 {row['f1']:.2f})", ""]
    for t in row.get("trace", []):
        kind = t.get("kind")
        if kind == "pseudo_step":
            verdict = "retrieve" if t.get("retrieve") else "no retrieval"
            lines.append(f"- *pseudo-generation:* “{_cell(t['output'], 300)}” — U(c) = {_u(t.get('u'))} "
                         f"vs δ = {_u(t.get('delta'))} → **{verdict}**")
        elif kind == "rerank":
            lines.append(f"- *query:* “{t.get('query', '')}”")
            cands = t.get("candidates", [])
            # rank by the re-ranking key: U, or +inf when the candidate's step came out empty
            key = [c.get("key", c["u"]) if c.get("key", c["u"]) is not None else math.inf for c in cands]
            rank_u = {i: r + 1 for r, i in enumerate(sorted(range(len(cands)), key=lambda i: key[i]))}
            lines.append("")
            lines.append("| #BM25 | #U | U(c) | passage | step generated with it |")
            lines.append("|---|---|---|---|---|")
            for i, c in enumerate(cands):
                mark = " ✓" if c["id"] == t.get("chosen") else ""
                empty = " (empty step: +inf)" if key[i] == math.inf else ""
                lines.append(f"| {i + 1} | {rank_u[i]} | {_u(c['u'])}{empty}{mark} | {c.get('title', '')} "
                             f"({c['id']}) | {_cell(c.get('output', ''))} |")
            lines.append("")
        elif kind and kind.startswith("final_"):
            lines.append(f"- *{kind.replace('final_', 'from ')}:* answer “{t.get('answer')}”, "
                         f"U = {_u(t.get('u'))}")
        elif kind == "direct":
            lines.append(f"- *direct answer:* “{_cell(t['output'], 300)}”, "
                         f"U = {_u(t.get('u'))} vs δ = {_u(t.get('delta'))}")
        elif kind == "choice":
            chose = 'kept the direct answer' if t.get('kept_direct') else f"passage {t.get('chosen')}"
            lines.append(f"- *choice:* {chose}")
    extra = row.get("extra") or {}
    if "choice" in extra:
        lines.append(f"- **self-aware reasoning kept the {extra['choice']} path** (rationales: "
                     f"“{extra.get('rationale_answer')}”, U = {_u(extra.get('rationale_u'))}; knowledge: "
                     f"“{extra.get('knowledge_answer')}”, U = {_u(extra.get('knowledge_u'))})")
    return "\n".join(lines)


def load_run(path) -> list[dict]:
    return read_results(path)
