"""TAIKC: Tree-organized Active Internal Knowledge Completion (prompt-only, and with KBAE).

Per question (paper Section 3):
  1. decompose the question into a tree of sub-questions with #queryX references (Table 12);
  2. pre-order traversal, the root q0 excluded: fill each node's placeholders with the answers of
     earlier nodes (Eq. 2), then Confident QA (Table 17); a reply with RAG_REQUIRED triggers
     retrieval with the filled sub-question and an answer over the passages (Eq. 3); if that
     answer says the passages lack it, Direct QA answers instead (reasoning continuation, App. H);
  3. one knowledge chain per root-to-leaf path, each summarised into a sentence (Eq. 5, Table 12);
  4. the final answer from the question and the chains' summaries (Eq. 6).
`taikc-kbae` sends the Confident QA calls to the KBAE LoRA-adapted copy of the model (kbae.py).
The paper takes the top 5 passages of an e5 re-ranker; we take BM25's top 3, as the other methods.
"""
from __future__ import annotations

from ...core.errors import UserError
from . import prompts as P
from ..base import Method, MethodResult, hits_brief, step_record
from .tree import QuestionTree, chain_json, chain_text, chains, fill_placeholders, parents, parse_tree, preorder


class TAIKC(Method):
    name = "taikc"
    DEFAULTS = {"top_k_docs": 3, "n_decompose_demos": len(P.DECOMPOSE_DEMOS), "max_nodes": 8,
                "max_decompose_tokens": 256, "max_answer_tokens": 32, "max_summary_tokens": 96,
                "summarize_chains": True}

    # the model that answers Confident QA; taikc-kbae overrides it
    @property
    def confident_backend(self):
        return self.backend

    def _ask(self, prompt: str, max_new_tokens: int, backend=None, stop=(P.ANSWER_STOP,)) -> str:
        return (backend or self.backend).generate(prompt, max_new_tokens=max_new_tokens,
                                                  stop=list(stop)).text

    def answer(self, record) -> MethodResult:
        s, q = self.settings, record.question
        trace: list[dict] = []
        tree = self._decompose(q, trace)
        parent_of = parents(tree)
        answered = []
        for node in preorder(tree):
            node.filled = fill_placeholders(node.question, answered, parent_of[id(node)])
            self._solve(node, trace)
            answered.append(node)
        summaries = [self._summarize(c, trace) for c in chains(tree)]
        prompt = P.final_answer_prompt(q, summaries)
        raw = self._ask(prompt, s["max_answer_tokens"])
        answer = P.clean_answer(raw)
        trace.append(step_record("final_answer", prompt, raw, answer=answer))
        return MethodResult(answer=answer, raw_output=raw, trace=trace, n_retrievals=self.q.n_search,
                            extra={"tree_parse": tree.how, "knowledge_chains": summaries,
                                   "n_nodes": len(answered),
                                   "n_confident": sum(n.source == "confident" for n in answered)})

    # --------------------------------------------------------------------------------- steps
    def _decompose(self, q: str, trace: list) -> QuestionTree:
        s = self.settings
        prompt = P.decompose_prompt(q, s["n_decompose_demos"])
        raw = self._ask(prompt, s["max_decompose_tokens"], stop=[P.DECOMPOSE_STOP])
        tree = parse_tree(raw, q, s["max_nodes"])
        trace.append(step_record("decompose", prompt, raw, parsed=tree.how,
                                 nodes=[(n.label, n.question) for n in preorder(tree)]))
        return tree

    def _solve(self, node, trace: list) -> None:
        """Eq. 3 and the reasoning continuation: confident answer, else RAG, else Direct QA."""
        s = self.settings
        prompt = P.confident_qa_prompt(node.filled)
        reply = self._ask(prompt, s["max_answer_tokens"], backend=self.confident_backend)
        entry = step_record("node", prompt, reply, label=node.label, question=node.question,
                            filled=node.filled, retrieved=False)
        if not P.is_rag_required(reply):
            node.answer, node.source = P.clean_answer(reply), "confident"
        else:
            hits = self.search(node.filled, s["top_k_docs"])
            self.q.n_search += 1
            rag_prompt = P.document_qa_prompt(node.filled, [h.text for h in hits])
            rag = self._ask(rag_prompt, s["max_answer_tokens"])
            entry.update(retrieved=True, query=node.filled, hits=hits_brief(hits), rag_output=rag)
            node.answer, node.source = P.clean_answer(rag), "rag"
            if P.needs_continuation(rag):
                direct = self._ask(P.direct_qa_prompt(node.filled), s["max_answer_tokens"])
                entry.update(direct_output=direct)
                node.answer, node.source = P.clean_answer(direct), "direct"
        entry.update(answer=node.answer, source=node.source)
        trace.append(entry)

    def _summarize(self, chain, trace: list) -> str:
        if not self.settings["summarize_chains"]:
            return chain_text(chain)
        prompt = P.summarize_prompt(chain_json(chain))
        raw = self._ask(prompt, self.settings["max_summary_tokens"])
        # an empty summary would drop the chain: its own question/answer text stands in
        summary = " ".join(raw.split()) or chain_text(chain)
        trace.append(step_record("summarize", prompt, raw, chain=[n.label for n in chain],
                                 summary=summary))
        return summary


class TAIKCKBAE(TAIKC):
    """TAIKC with Confident QA answered by the KBAE-adapted model (`kbae_adapter`: its directory)."""

    name = "taikc-kbae"
    DEFAULTS = {**TAIKC.DEFAULTS, "kbae_adapter": None}
    one_question_at_a_time = "its KBAE adapter runs the model directly, outside the thread batcher"

    def __init__(self, backend, searcher, dataset_name, settings=None):
        super().__init__(backend, searcher, dataset_name, settings)
        if not self.settings["kbae_adapter"]:
            raise UserError("taikc-kbae needs a trained KBAE adapter", setting="kbae_adapter",
                            fix="train one with seakr_repro.methods.taikc.kbae.bootstrap_adapter(backend, "
                                "single_hop_records, out_dir) and pass kbae_adapter=out_dir")
        self.settings["kbae_adapter"] = str(self.settings["kbae_adapter"])
        self._kbae = None
        self._adapter_sha: str | None = None

    @property
    def config(self):
        # the directory's contents, not its name, key the output: any copy resumes the same run file
        if self._adapter_sha is None:
            from .kbae import adapter_fingerprint
            self._adapter_sha = adapter_fingerprint(self.settings["kbae_adapter"])
        config = {k: v for k, v in super().config.items() if k != "kbae_adapter"}
        return {**config, "kbae_adapter_sha": self._adapter_sha}

    @property
    def confident_backend(self):
        if self._kbae is None:
            from .kbae import load_kbae_backend
            self._kbae = load_kbae_backend(self.backend, self.settings["kbae_adapter"])
        return self._kbae
