"""TAIKC's prompts, transcribed from its appendix (Tables 12, 13, 16 and 17).

Table 12: the decomposition, document-answering (sub-questions AND the final answer over the
chains' summaries), summarisation prompts; Table 17 (and 13): Direct and Confident QA; Table 16:
the decomposition demonstrations. We keep Table 17's line breaks (Tables 12/13 print the sentences
run together); where the Table 16 demonstrations go is our choice, stated at `decompose_prompt`.
"""
from __future__ import annotations

import json
import re
from typing import Sequence

RAG_REQUIRED = "RAG_REQUIRED"
# What the model types for the identifier: exact, or with a space / hyphen, any case.
RAG_REQUIRED_RE = re.compile(r"RAG[\s_\-]*REQUIRED", re.IGNORECASE)

ANSWER_SUFFIX = "Please provide the answer directly and do not output any other words:"
# The paper sent these prompts as chat turns; our backends complete raw text, so a line break
# closes each prompt (the reply starts on its own line, as a chat reply would) and generation
# stops at the next one (ANSWER_STOP). Without it SmolLM2 opens with "\n" and then repeats itself.
ANSWER_START = "\n"
ANSWER_STOP = "\n"

# --- Table 12: decomposition ------------------------------------------------------------------
DECOMPOSE_INSTRUCTION = (
    "You are an AI assistant adept at dissecting intricate queries into a series of straightforward, logically "
    "interlinked questions, and adeptly representing each of these as discrete objects within a JSON structure. "
    "Decompose the following complex question into smaller, logically connected queries. Each query should be "
    "represented as a separate object in a JSON format. For questions that require further follow-up (e.g., "
    "sub-queries about the results), nest those queries under the parent query. Rules: 1. Each question should be "
    "split into logical, simpler questions. 2. Use \"query1,\" \"query2,\" etc., for the main and sub-queries. 3. If "
    "a sub-query depends on the answer to a previous query, use a reference in the form of \"#queryX\" (e.g., \"What "
    "is the birth year of #query1?\") to indicate the dependency. The number should correspond to the query being "
    "referenced. 4. When decomposing a multi-hop question, only generate essential factual sub-questions needed to "
    "answer the main query, and avoid any comparison, intersection, or synthesis questions.")
DECOMPOSE_TAIL = "Decompose the following question without any additional explanation or words."

# --- Table 16: demonstrations of question decomposition ---------------------------------------
DECOMPOSE_DEMOS: tuple[tuple[str, dict], ...] = (
    ("Which magazine was started first Arthur's Magazine or First for Women?",
     {"query1": {"question": "When was the magazine Arthur's Magazine started?"},
      "query2": {"question": "When was the magazine First for Women started?"}}),
    ("What nationality was James Henry Miller's wife?",
     {"query1": {"question": "Who was James Henry Miller's wife?",
                 "children": {"query2": {"question": "What is the nationality of #query1?"}}}}),
    ("Which film whose director is younger, Charge It To Me or Danger: Diabolik?",
     {"query1": {"question": "Who directed the film Charge It To Me?",
                 "children": {"query2": {"question": "What is the birth year of #query1?"}}},
      "query3": {"question": "Who directed the film Danger: Diabolik?",
                 "children": {"query4": {"question": "What is the birth year of #query3?"}}}}),
)
# The demos are pretty-printed as in Table 16, so the top-level object closes with "}" at the
# start of a line: generation stops there (the parser closes the braces again).
DECOMPOSE_STOP = "\n}"

# --- Table 17: Direct QA and Confident QA -----------------------------------------------------
_QA_HEAD = ("Next, I will provide a question. Please output only the exact answer to the question directly, without "
            "adding any additional explanations, guiding phrases, or background information.")
DIRECT_QA = _QA_HEAD + "\nHere is the question you need to handle: {question}\n" + ANSWER_SUFFIX
CONFIDENT_QA = (
    _QA_HEAD + "\nIf you are uncertain about the answer or unable to provide an exact answer "
    "directly, please respond with \"RAG_REQUIRED\" so that I can proceed with further information "
    "retrieval (RAG).\nIf there is any uncertainty about the correctness of your answer, even "
    "slightly, you must respond with \"RAG_REQUIRED.\" Only provide an answer if you are absolutely "
    "certain it is correct.\nHere is the question you need to handle: {question}\n" + ANSWER_SUFFIX)

# --- Table 12: answering over documents (sub-questions and the final answer) ------------------
DOCUMENT_QA = ("You will receive a question and several documents. The following are given "
               "documents: {documents} Question: {question} " + ANSWER_SUFFIX)

# --- Table 12: summarising one knowledge chain ------------------------------------------------
SUMMARIZE = ("Summarize the information provided in the json text, which consists of several query-and-answer pairs. "
             "Please do not omit any information in the question-and-answer pairs. Summarize the following "
             "query-and-answer pairs into a sentence: {pairs} Output your summary below:")

# --- Appendix H: reasoning continuation -------------------------------------------------------
# "a set of trigger words, including 'found', 'mention', 'provide' and so on" together with a
# negation (e.g. 'not'): the answer says the documents lack the information. The paper names three
# triggers and "so on"; the others below are the same complaint in the words small models use.
CONTINUATION_TRIGGERS = ("found", "mention", "provide", "contain", "specif", "state", "include",
                         "give", "available", "inform")
NEGATIONS = ("not", "no", "n't", "cannot", "unable", "none", "neither")


def decompose_prompt(question: str, n_demos: int = len(DECOMPOSE_DEMOS)) -> str:
    """Table 12's decomposition prompt; our choice: the Table 16 demonstrations (question line, JSON
    below) go between the rules and the closing request."""
    parts = [DECOMPOSE_INSTRUCTION]
    if n_demos:
        parts.append("Examples:\n\n" + "\n\n".join(
            f"{q}\n{json.dumps(tree, indent=2, ensure_ascii=False)}"
            for q, tree in DECOMPOSE_DEMOS[:n_demos]))
    parts.append(f"{DECOMPOSE_TAIL} {question.strip()}\n")
    return "\n\n".join(parts)


def confident_qa_prompt(question: str) -> str:
    return CONFIDENT_QA.format(question=question.strip()) + ANSWER_START


def direct_qa_prompt(question: str) -> str:
    return DIRECT_QA.format(question=question.strip()) + ANSWER_START


def document_qa_prompt(question: str, documents: Sequence[str]) -> str:
    """Sub-question over retrieved passages: each passage introduced by "passage:" (Table 12)."""
    docs = " ".join(f"passage: {' '.join(d.split())}" for d in documents)
    return DOCUMENT_QA.format(documents=docs, question=question.strip()) + ANSWER_START


def final_answer_prompt(question: str, summaries: Sequence[str]) -> str:
    """The complex question over the knowledge chains' summaries, which stand as the documents
    without the "passage:" label (the last example of Table 12)."""
    docs = " ".join(" ".join(s.split()) for s in summaries)
    return DOCUMENT_QA.format(documents=docs, question=question.strip()) + ANSWER_START


def summarize_prompt(pairs_json: str) -> str:
    return SUMMARIZE.format(pairs=pairs_json) + ANSWER_START


# --- reading the model's short answers --------------------------------------------------------
_LABEL = re.compile(r"^(?:(?:the\s+)?(?:final\s+)?answer\s+is\b\s*:?"     # "The answer is"
                    r"|(?:final\s+)?(?:answer|output|a)\s*[:\-])\s*",      # "Answer:", "A:"
                    re.IGNORECASE)
_QUOTES = "\"'`“”‘’"


def clean_answer(text: str) -> str:
    """The first line of a "do not output any other words" reply that is not empty without a leading
    label ("Answer:"), its quotes and closing period (else "Paris." ends up in the next sub-question)."""
    lines = (_LABEL.sub("", ln.strip()).strip().strip(_QUOTES).strip() for ln in text.splitlines())
    line = next((ln for ln in lines if ln), "")
    if line.endswith(".") and not re.search(r"(?:^|\s)(?:[A-Za-z]\.)+$", line):
        line = line[:-1].rstrip().strip(_QUOTES).strip()
    return line


def is_rag_required(reply: str) -> bool:
    """Confident QA asked for retrieval: the identifier anywhere in the reply, or no answer at all
    (an empty reply cannot fill a placeholder, so it is treated as a knowledge gap)."""
    return bool(RAG_REQUIRED_RE.search(reply)) or not clean_answer(reply)


_NEG_RE = re.compile(r"\b(?:" + "|".join(re.escape(n) for n in NEGATIONS if n != "n't") + r")\b|n't",
                     re.IGNORECASE)
_TRIGGER_RE = re.compile(r"\b(?:" + "|".join(CONTINUATION_TRIGGERS) + r")\w*", re.IGNORECASE)


def needs_continuation(reply: str) -> bool:
    """Appendix H: the RAG answer says the documents lack it (a negation and a trigger word, "not
    mentioned") or is unusable (empty, RAG_REQUIRED parroted): Direct QA continues the chain."""
    answer = clean_answer(reply)
    if not answer or RAG_REQUIRED_RE.search(reply):
        return True
    return bool(_NEG_RE.search(reply) and _TRIGGER_RE.search(reply))
