"""TAIKC: question-tree parsing, placeholder filling, chains, and the control flow with a scripted
backend (Confident QA -> answer, RAG_REQUIRED -> retrieval, "not mentioned" -> Direct QA)."""
import json

import pytest

from fakes import FakeBackend, FakeSearcher, hit
from seakr_repro.data.records import QuestionRecord
from seakr_repro.core.errors import UserError
from seakr_repro.methods.taikc import prompts as P
from seakr_repro.methods.taikc.method import TAIKC, TAIKCKBAE
from seakr_repro.methods.taikc.tree import (
    Node,
    chain_json,
    chains,
    fill_placeholders,
    parse_tree,
    preorder,
    references,
)

Q = "Which film has the director who is older, The Carousel Of Death or Nameless Star?"
TREE = {"query1": {"question": "Who directed the film The Carousel Of Death?",
                   "children": {"query2": {"question": "What is the birth year of #query1?"}}},
        "query3": {"question": "Who directed the film Nameless Star?",
                   "children": {"query4": {"question": "What is the birth year of #query3?"}}}}


def labels(tree):
    return [n.label for n in preorder(tree)]


# ------------------------------------------------------------------------------- parsing
def test_parse_valid_nested_tree_preorder_and_chains():
    tree = parse_tree(json.dumps(TREE, indent=2), Q)
    assert (tree.how, tree.fallback) == ("json", False)
    assert labels(tree) == ["query1", "query2", "query3", "query4"]
    assert [[n.label for n in c] for c in chains(tree)] == [["query1", "query2"], ["query3", "query4"]]
    assert preorder(tree)[1].question == "What is the birth year of #query1?"


def test_parse_output_cut_at_the_stop_string_with_surrounding_text():
    text = "Here is the JSON:\n" + json.dumps(TREE, indent=2)
    cut = text[: text.rfind(P.DECOMPOSE_STOP)]          # what generation returns at "\n}"
    tree = parse_tree(cut, Q)
    assert tree.how == "json" and labels(tree) == ["query1", "query2", "query3", "query4"]


def test_parse_flat_siblings_give_one_chain_each():
    text = '{"query1": {"question": "When was A started?"}, "query2": {"question": "When was B started?"}}'
    tree = parse_tree(text + "\nWhich magazine ...", "Q?")
    assert [[n.label for n in c] for c in chains(tree)] == [["query1"], ["query2"]]


def test_parse_repairs_missing_and_trailing_commas():
    text = ('{"query1": {"question": "Who is A\'s wife?" "children": {"query2": '
            '{"question": "Where was #query1 born?",}}}}')
    tree = parse_tree(text, "Q?")
    assert tree.how == "repaired"
    assert [(n.label, n.question) for n in preorder(tree)] == [
        ("query1", "Who is A's wife?"), ("query2", "Where was #query1 born?")]
    assert len(chains(tree)) == 1


def test_parse_other_shapes_lists_strings_wrappers_and_single_quotes():
    listed = parse_tree('[{"question": "Who is A?"}, {"question": "Age of #query1?"}]', "Q?")
    assert [(n.label, n.number) for n in preorder(listed)] == [("query1", 1), ("query2", 2)]
    bare = parse_tree('{"sub_queries": {"q1": "Who is A?", "q2": "Age of #q1?"}}', "Q?")
    assert [n.question for n in preorder(bare)] == ["Who is A?", "Age of #q1?"]
    assert [n.number for n in preorder(bare)] == [1, 2]
    python = parse_tree("{'query1': {'question': 'Who?', "
                        "'children': [{'question': 'Age of #query1?'}]}}", "Q?")
    assert [[n.question for n in c] for c in chains(python)] == [["Who?", "Age of #query1?"]]


def test_parse_broken_json_falls_back_to_pairs_with_parents_from_references():
    text = 'query1: {question: "Who directed X?"}, query2: {question: "When was #query1 born?" ] ] ]'
    tree = parse_tree(text, "Q?")
    assert tree.how == "pairs"
    assert [[n.label for n in c] for c in chains(tree)] == [["query1", "query2"]]
    lines = parse_tree("1. Who directed X?\n2. When was #1 born?\n3) Who directed Y?", "Q?")
    assert [[n.label for n in c] for c in chains(lines)] == [["query1", "query2"], ["query3"]]


@pytest.mark.parametrize("text", ["", "I cannot decompose this.", "{}", '{"note": "none"}', "[1, 2]",
                                  "{{{{"])
def test_parse_nothing_valid_falls_back_to_the_question_itself(text):
    tree = parse_tree(text, "  Who is older, A or B? ")
    assert tree.fallback and tree.how == "fallback"
    assert [(n.label, n.question) for n in preorder(tree)] == [("query1", "Who is older, A or B?")]
    assert len(chains(tree)) == 1


def test_parse_caps_nodes_in_preorder():
    tree = parse_tree(json.dumps(TREE), Q, max_nodes=3)
    assert labels(tree) == ["query1", "query2", "query3"]


# ------------------------------------------------------------------------------- filling
def answered(*pairs):
    return [Node(f"query{i}", i, "?", answer=a) for i, a in pairs]


def test_fill_placeholders_variants_and_numbering_mistakes():
    done = answered((1, "Heinz Paul"), (3, "Mihail Kozakov"))
    assert fill_placeholders("Birth year of #query1?", done) == "Birth year of Heinz Paul?"
    assert fill_placeholders("Is #Query3 older than #query 1?", done) == \
        "Is Mihail Kozakov older than Heinz Paul?"
    assert fill_placeholders("Born where, {#query3}?", done) == "Born where, Mihail Kozakov?"
    assert references("age of #query12 and #3") == [12, 3]
    # a reference to no earlier node: the parent's answer, else left as written
    parent = Node("query5", 5, "?", answer="Ann Lee")
    assert fill_placeholders("Age of #query9?", done, parent) == "Age of Ann Lee?"
    assert fill_placeholders("Age of #query9?", done, None) == "Age of #query9?"
    # duplicate numbers: the latest earlier node wins; an empty answer counts as none
    assert fill_placeholders("#query1", answered((1, "old"), (1, "new"))) == "new"
    assert fill_placeholders("#query1", answered((1, "x"), (1, ""))) == "x"


def test_chain_json_nests_filled_questions_and_answers():
    a = Node("query1", 1, "Who directed X?", filled="Who directed X?", answer="Heinz Paul")
    b = Node("query2", 2, "Birth year of #query1?", filled="Birth year of Heinz Paul?", answer="1918")
    a.children = [b]
    assert json.loads(chain_json([a, b])) == {"query1": {
        "question": "Who directed X?", "answer": "Heinz Paul",
        "children": {"query2": {"question": "Birth year of Heinz Paul?", "answer": "1918"}}}}


def test_answer_reading_rules():
    assert P.clean_answer("\n Answer: \"Paris\".\nmore words") == "Paris"
    assert P.clean_answer("U.S.") == "U.S."
    assert P.clean_answer("The answer is:\n  Heinz Paul\n") == "Heinz Paul"
    assert P.clean_answer("the answer is 1918.") == "1918"
    assert P.clean_answer("A Beautiful Mind") == "A Beautiful Mind"
    assert P.is_rag_required("rag_required") and P.is_rag_required("RAG REQUIRED.")
    assert P.is_rag_required("   ") and not P.is_rag_required("Heinz Paul")
    assert P.needs_continuation("The passages do not mention his birth year.")
    assert P.needs_continuation("Not found") and P.needs_continuation("")
    assert not P.needs_continuation("No") and not P.needs_continuation("1918")


# ------------------------------------------------------------------------------- control flow
REC = QuestionRecord(id="q1", question=Q, answers=["The Carousel Of Death"])
DOCS = {"Who directed the film The Carousel Of Death?":
        [hit("d1", "The Carousel Of Death (1928) by Heinz Paul.")],
        "What is the birth year of Heinz Paul?": [hit("d2", "Heinz Paul (1893-1983) was a director.")]}


def question_of(prompt):
    if "Here is the question you need to handle: " in prompt:
        return prompt.split("Here is the question you need to handle: ")[1].split("\n")[0]
    return prompt.split(" Question: ")[1].split(" Please provide")[0]


TREE_JSON = json.dumps(TREE, indent=2)


def scripted(confident, rag=None, direct=None, decomposition=TREE_JSON):
    """A backend answering each prompt kind from the dicts (keyed by the filled sub-question)."""
    def respond(prompt, stop):
        if prompt.startswith("You are an AI assistant adept"):
            return decomposition[: decomposition.rfind("\n}")] if "\n}" in stop else decomposition
        if prompt.startswith("Summarize"):
            pairs = json.loads(prompt.split("into a sentence: ")[1].split(" Output your summary")[0])
            return "SUMMARY " + json.dumps(pairs)
        if "RAG_REQUIRED" in prompt:
            return confident[question_of(prompt)]
        if prompt.startswith("Next, I will provide"):
            return direct[question_of(prompt)]
        if "passage: " in prompt:
            return rag[question_of(prompt)]
        return " The Carousel Of Death\n"          # the final answer over the chain summaries
    return FakeBackend(respond)


def test_control_flow_confident_rag_and_continuation():
    confident = {"Who directed the film The Carousel Of Death?": " RAG_REQUIRED",
                 "What is the birth year of Heinz Paul?": "RAG_REQUIRED.",
                 "Who directed the film Nameless Star?": " Mihail Kozakov",
                 "What is the birth year of Mihail Kozakov?": "1934"}
    rag = {"Who directed the film The Carousel Of Death?": " Heinz Paul.",
           "What is the birth year of Heinz Paul?": "The passages do not provide his birth year."}
    direct = {"What is the birth year of Heinz Paul?": "1893"}
    backend = scripted(confident, rag, direct)
    searcher = FakeSearcher([], results=lambda q: DOCS[q])
    res = TAIKC(backend, searcher, "bundled-2wiki").run(REC)

    assert searcher.queries == ["Who directed the film The Carousel Of Death?",
                                "What is the birth year of Heinz Paul?"]   # filled, in pre-order
    assert res.n_retrievals == 2
    nodes = [t for t in res.trace if t["kind"] == "node"]
    assert [(t["filled"], t["answer"], t["source"], t["retrieved"]) for t in nodes] == [
        ("Who directed the film The Carousel Of Death?", "Heinz Paul", "rag", True),
        ("What is the birth year of Heinz Paul?", "1893", "direct", True),
        ("Who directed the film Nameless Star?", "Mihail Kozakov", "confident", False),
        ("What is the birth year of Mihail Kozakov?", "1934", "confident", False)]
    assert nodes[1]["question"] == "What is the birth year of #query1?"
    assert [h["id"] for h in nodes[0]["hits"]] == ["d1"] and "hits" not in nodes[2]
    # one summary per root-to-leaf chain, each from that chain's filled pairs only
    sums = [t for t in res.trace if t["kind"] == "summarize"]
    assert [t["chain"] for t in sums] == [["query1", "query2"], ["query3", "query4"]]
    assert "1893" in res.extra["knowledge_chains"][0] and "Kozakov" not in res.extra["knowledge_chains"][0]
    final_prompt = backend.generate_calls[-1][0]
    assert all(s in final_prompt for s in res.extra["knowledge_chains"]) and REC.question in final_prompt
    assert res.answer == "The Carousel Of Death"
    assert res.extra["n_confident"] == 2 and res.extra["tree_parse"] == "json"
    # calls: decompose, 4 confident, 2 rag, 1 direct, 2 summaries, final
    assert len(backend.generate_calls) == 11


def test_all_confident_means_no_retrieval_and_fallback_tree_still_answers():
    backend = scripted({Q: "The Carousel Of Death"}, decomposition="Sorry, I can't.")
    searcher = FakeSearcher([hit("x", "unused")])
    res = TAIKC(backend, searcher, "bundled-2wiki", {"summarize_chains": False}).run(REC)
    assert res.n_retrievals == 0 and searcher.queries == []
    assert res.extra["tree_parse"] == "fallback"
    assert [t["filled"] for t in res.trace if t["kind"] == "node"] == [Q]
    assert res.extra["knowledge_chains"] == [f"{Q} The Carousel Of Death."]
    assert res.answer == "The Carousel Of Death"


def test_kbae_variant_sends_only_confident_qa_to_the_adapted_model(tmp_path, monkeypatch):
    (tmp_path / "adapter_config.json").write_text("{}")
    adapted = scripted({Q: "The Carousel Of Death"})
    import seakr_repro.methods.taikc.kbae as kbae
    monkeypatch.setattr(kbae, "load_kbae_backend", lambda base, d: adapted)
    base = scripted({}, decomposition="no tree")
    method = TAIKCKBAE(base, FakeSearcher([]), "bundled-2wiki", {"kbae_adapter": tmp_path})
    res = method.run(REC)
    assert res.answer == "The Carousel Of Death" and res.n_retrievals == 0
    assert [c[0] for c in adapted.generate_calls] == [P.confident_qa_prompt(Q)]
    assert not any("RAG_REQUIRED" in c[0] for c in base.generate_calls)
    assert method.config["method"] == "taikc-kbae" and len(method.config["kbae_adapter_sha"]) == 16
    # the same adapter in another folder (another clone): the same configuration, so the same run file
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    (moved / "adapter_config.json").write_text("{}")
    assert TAIKCKBAE(base, FakeSearcher([]), "bundled-2wiki", {"kbae_adapter": moved}).config == method.config
    with pytest.raises(UserError, match="KBAE adapter"):
        TAIKCKBAE(base, FakeSearcher([]), "bundled-2wiki")


def test_prompts_follow_the_paper_tables():
    dp = P.decompose_prompt("Are A and B of the same nationality?")
    assert dp.startswith("You are an AI assistant adept at dissecting intricate queries")
    assert '"What is the birth year of #query1?"' in dp and "Danger: Diabolik" in dp
    assert dp.endswith("without any additional explanation or words. Are A and B of the same nationality?\n")
    assert P.document_qa_prompt("Q?", ["a  b", "c"]) == (
        "You will receive a question and several documents. The following are given documents: "
        "passage: a b passage: c Question: Q? Please provide the answer directly and do not output "
        "any other words:\n")
    assert P.confident_qa_prompt("q").count("RAG_REQUIRED") == 2
    assert "RAG_REQUIRED" not in P.direct_qa_prompt("q")
