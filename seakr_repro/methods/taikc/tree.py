"""TAIKC's question tree: parsing the decomposition, pre-order traversal, placeholder filling and
knowledge chains (paper Sections 3.1-3.3).

The model is asked for JSON such as {"query1": {"question": "Who directed X?", "children":
{"query2": {"question": "... #query1?"}}}, "query3": {...}}. Small models return much less tidy
text, so `parse_tree` tries, in order: 1. the first JSON object in the output, its braces closed if
generation stopped early; 2. the same after light repairs (trailing or missing commas, Python-style
quotes and literals); 3. "queryN": "question" pairs (a node's parent is the node its first #query
reference names); 4. the fallback: one node, the question itself (`QuestionTree.fallback`).
Steps 1-2 accept nodes keyed by any name (the number read from the key), objects or bare question
strings, children under "children"/"sub_queries" (object or list) or nested as further query keys,
a top-level list, and one wrapper object ("queries": {...}) around the tree.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field

_REF = re.compile(r"\{?#\s*(?:query\s*)?(\d+)\}?", re.IGNORECASE)
_NUM = re.compile(r"(\d+)")
_QUESTION_KEYS = ("question", "query", "q", "text", "sub_question", "subquestion")
_CHILD_KEYS = ("children", "sub_queries", "subqueries", "sub-queries", "subquestions",
               "sub_questions", "follow_up", "followups")
_PAIR = re.compile(r"[\"']?(query\s*\d+)[\"']?\s*:\s*(?:\{\s*[\"']?question[\"']?\s*:\s*)?"
                   r"(?:\"([^\"\n]{3,})\"|'([^'\n]{3,})')", re.IGNORECASE)
# "query 2: What ...?", "Q2. What ...?", "2) What ...?" -- only lines that ask a question.
_LINE = re.compile(r"^\s*(?:(?:sub-?)?query\s*(\d+)|q(\d+)|(\d+))\s*[:.)]\s*([^\n]{3,}\?)",
                   re.IGNORECASE | re.MULTILINE)


@dataclass
class Node:
    label: str                        # the model's key ("query3")
    number: int | None                # the X that "#queryX" uses
    question: str
    children: list["Node"] = field(default_factory=list)
    filled: str = ""                  # the question with its placeholders replaced
    answer: str = ""
    source: str = ""                  # confident | rag | direct


@dataclass
class QuestionTree:
    """The sub-question tree below the root q0 (the complex question itself)."""

    question: str
    nodes: list[Node]                 # top-level sub-questions (children of q0)
    fallback: bool = False            # True: nothing parsed, one node = the question itself
    how: str = "json"                 # json | repaired | pairs | fallback


# ---------------------------------------------------------------------------------- parsing
def parse_tree(text: str, question: str, max_nodes: int = 8) -> QuestionTree:
    """The question tree in the model's decomposition `text`, at most `max_nodes` nodes (pre-order
    prefix; a rambling model would otherwise cost a call per invented node)."""
    for how, data in _json_candidates(text):
        nodes = _nodes_from(data)
        if nodes:
            return _numbered(QuestionTree(question, _truncate(nodes, max_nodes), how=how))
    nodes = _nodes_from_pairs(text)
    if nodes:
        return _numbered(QuestionTree(question, _truncate(nodes, max_nodes), how="pairs"))
    # the fallback: the complex question is its own (only) sub-question
    return QuestionTree(question, [Node("query1", 1, question.strip())], fallback=True, how="fallback")


def _json_candidates(text: str):
    start = text.find("{")
    list_start = text.find("[")
    if list_start >= 0 and (start < 0 or list_start < start):
        start = list_start
    if start < 0:
        return
    blob = _balanced(text[start:])
    for how, candidate in (("json", blob), ("repaired", _repair(blob))):
        for loader in (json.loads, _literal):
            try:
                yield how, loader(candidate)
                break
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue


_PY_LITERALS = {"true": "True", "false": "False", "null": "None"}


def _literal(s: str):
    """Python-style objects ('single quotes', True/None) that json rejects."""
    return ast.literal_eval(re.sub(r"\btrue\b|\bfalse\b|\bnull\b", lambda m: _PY_LITERALS[m[0]], s))


def _balanced(s: str) -> str:
    """The prefix of `s` up to its first balanced bracket; if it never closes (generation stopped
    at "\\n}" or ran out of tokens), the missing quote and brackets are appended."""
    stack, in_str, esc, quote = [], False, False, ""
    for i, ch in enumerate(s):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                in_str = False
            continue
        if ch in "\"'" and not (ch == "'" and i and s[i - 1].isalnum()):  # apostrophe in a word
            in_str, quote = True, ch
        elif ch in "{[":
            stack.append("}" if ch == "{" else "]")
        elif ch in "}]":
            if stack and stack[-1] == ch:
                stack.pop()
            if not stack:
                return s[: i + 1]
    tail = s.rstrip().rstrip(",")
    return tail + (quote if in_str else "") + "".join(reversed(stack))


def _repair(s: str) -> str:
    s = re.sub(r",\s*([}\]])", r"\1", s)                      # trailing commas
    # a missing comma before a member ("..."  "children": ...) or between objects on two lines
    s = re.sub(r"([}\]\"'])(\s+)([\"'][^\"'\n]*[\"']\s*:)", r"\1,\2\3", s)
    s = re.sub(r"([}\]])(\s*\n\s*)({)", r"\1,\2\3", s)
    s = re.sub(r"}\s*{", "}, {", s)
    return s


def _nodes_from(data) -> list[Node]:
    if isinstance(data, list):
        return [n for item in data for n in _nodes_from_value(None, item)]
    if not isinstance(data, dict):
        return []
    if _question_of(data) is not None:          # the object is itself one node
        return _nodes_from_value(None, data)
    # a string member is a node only under a numbered key or when it asks something ("note": ...)
    members = [(k, v) for k, v in data.items() if isinstance(v, (dict, list))
               or (isinstance(v, str) and (_NUM.search(str(k)) or v.strip().endswith("?")))]
    if len(members) == 1 and not _NUM.search(str(members[0][0])) \
            and isinstance(members[0][1], (dict, list)):
        return _nodes_from(members[0][1])       # {"queries": {...}} wrapper
    return [n for k, v in members for n in _nodes_from_value(str(k), v)]


def _question_of(obj: dict) -> str | None:
    for key in _QUESTION_KEYS:
        if isinstance(obj.get(key), str) and obj[key].strip():
            return obj[key].strip()
    return None


def _nodes_from_value(key: str | None, value) -> list[Node]:
    """Nodes for one member: an object with a question (children below it), a bare string, or, for a
    member without a question, its children lifted to this level."""
    if isinstance(value, str):
        return [_node(key, value.strip())] if value.strip() else []
    if isinstance(value, list):
        return [n for item in value for n in _nodes_from_value(None, item)]
    if not isinstance(value, dict):
        return []
    question = _question_of(value)
    children: list[Node] = []
    for k, v in value.items():
        if k in _QUESTION_KEYS or k == "answer":
            continue
        if k in _CHILD_KEYS:
            children.extend(_nodes_from(v) if isinstance(v, (dict, list)) else [])
        elif isinstance(v, (dict, str)) and _NUM.search(k):   # "query2" nested directly
            children.extend(_nodes_from_value(k, v))
    if question is None:
        return children
    return [_node(key, question, children)]


def _node(key: str | None, question: str, children: list[Node] | None = None) -> Node:
    m = _NUM.search(key or "")
    return Node(key or "", int(m[1]) if m else None, question, children or [])


def _nodes_from_pairs(text: str) -> list[Node]:
    """Step 3: "queryN": "..." pairs or "query N: ..." lines; parents from #query references."""
    found = [(m[1], m[2] or m[3]) for m in _PAIR.finditer(text)]
    if not found:
        found = [(f"query{m[1] or m[2] or m[3]}", m[4].strip().strip("\"',"))
                 for m in _LINE.finditer(text)]
    flat = [_node(re.sub(r"\s+", "", k.lower()), q.strip()) for k, q in found if q.strip()]
    roots: list[Node] = []
    for i, node in enumerate(flat):
        refs = references(node.question)
        parent = next((p for p in reversed(flat[:i]) if refs and p.number == refs[0]), None)
        (parent.children if parent else roots).append(node)
    return roots


def _numbered(tree: QuestionTree) -> QuestionTree:
    """Nodes the model left unnamed (list items) take their 1-based pre-order position, which is
    what a "#queryX" in a list-shaped decomposition counts."""
    for i, n in enumerate(preorder(tree), 1):
        if n.number is None:
            n.number, n.label = i, f"query{i}"
    return tree


def _truncate(nodes: list[Node], max_nodes: int) -> list[Node]:
    budget = [max(1, max_nodes)]

    def keep(ns: list[Node]) -> list[Node]:
        out = []
        for n in ns:
            if budget[0] <= 0:
                break
            budget[0] -= 1
            n.children = keep(n.children)
            out.append(n)
        return out
    return keep(nodes)


# ---------------------------------------------------------------------------------- traversal
def _walk(tree: QuestionTree):
    """(node, its ancestors top-down) in pre-order, the root q0 excluded (as the paper traverses)."""
    def visit(n: Node, path: list[Node]):
        yield n, path
        for c in n.children:
            yield from visit(c, path + [n])
    for n in tree.nodes:
        yield from visit(n, [])


def preorder(tree: QuestionTree) -> list[Node]:
    return [n for n, _ in _walk(tree)]


def parents(tree: QuestionTree) -> dict[int, Node | None]:
    """id(node) -> its parent node (None for children of q0)."""
    return {id(n): (path[-1] if path else None) for n, path in _walk(tree)}


def references(question: str) -> list[int]:
    """The X of every #queryX placeholder in `question`, in order."""
    return [int(m[1]) for m in _REF.finditer(question)]


def fill_placeholders(question: str, answered: list[Node], parent: Node | None = None) -> str:
    """Equation 2: each #queryX replaced by the answer of sub-question X among the nodes `answered`
    (the latest of two alike; an empty answer is none), else by the parent's answer (a numbering
    mistake: a nested sub-question depends on its parent), else left as written."""
    by_number = {n.number: n.answer for n in answered if n.number is not None and n.answer}

    def sub(m: re.Match) -> str:
        x = int(m[1])
        if x in by_number:
            return by_number[x]
        return parent.answer if parent is not None and parent.answer else m[0]
    return _REF.sub(sub, question)


# ---------------------------------------------------------------------------------- chains
def chains(tree: QuestionTree) -> list[list[Node]]:
    """Equation 5: the sub-questions on every root-to-leaf path, top-down."""
    return [path + [n] for n, path in _walk(tree) if not n.children]


def chain_json(chain: list[Node]) -> str:
    """A chain as the nested question/answer JSON the summarisation prompt reads (Table 12)."""
    inner: dict | None = None
    for n in reversed(chain):
        body = {"question": n.filled or n.question, "answer": n.answer}
        if inner is not None:
            body["children"] = inner
        inner = {n.label: body}
    return json.dumps(inner or {}, ensure_ascii=False)


def chain_text(chain: list[Node]) -> str:
    """A chain without a summarisation call: "Q1 A1. Q2 A2." (the `summarize_chains: False` path)."""
    parts = (f"{n.filled or n.question} {n.answer}".strip() for n in chain)
    return " ".join(p if p[-1] in ".?!" else p + "." for p in parts if p)
