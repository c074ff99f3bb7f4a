"""Golden tests of the in-context examples and SeaKR's prompt strings."""
import pytest

from seakr_repro.core.errors import UserError
from seakr_repro.prompts import (
    HOTPOTQA,
    IIRC,
    SIMPLE_QA,
    TWOWIKI,
    build_prompt,
    demos_for,
    format_demo,
    format_step,
    read_all_docs_prompt,
    read_all_steps_prompt,
    simple_qa_stops,
    stop_strings,
)


def test_example_counts_and_routing():
    assert (len(SIMPLE_QA), len(TWOWIKI), len(HOTPOTQA), len(IIRC)) == (9, 10, 11, 10)
    assert demos_for("bundled-2wiki", 10) == list(TWOWIKI)
    assert demos_for("bundled-hotpotqa", 3) == list(HOTPOTQA[:3])
    for name in ("bundled-single", "nq", "triviaqa", "squad", "fanoutqa"):
        assert demos_for(name, 2) == list(SIMPLE_QA[:2])
    assert demos_for("iirc", 100) == list(IIRC)      # n_shot caps, never pads
    with pytest.raises(UserError):
        demos_for("unknown-set", 2)


def test_pdf_leak_fixed_in_last_2wiki_example():
    last = TWOWIKI[-1]
    assert last.steps[0] == "The film Twenty Plus Two was directed by Joseph M. Newman."
    assert not any("Grand Duke" in s for s in last.steps)
    assert HOTPOTQA[-1].question.endswith("that has what last name?")


def test_demo_format_replaces_inner_periods():
    demo = TWOWIKI[5]  # Laughter In Hell
    assert format_demo(demo) == (
        "Question: When did the director of film Laughter In Hell die?\n"
        "Answer: The film Laughter In Hell was directed by Edward L  Cahn. "
        "Edward L  Cahn died on August 25, 1963. So the answer is August 25, 1963.")


def test_prompt_without_and_with_context_golden():
    demos = demos_for("bundled-2wiki", 2)
    head = ("Question: Who was born first out of Martin Hodge and Ivania Martinich?\n"
            "Answer: Martin Hodge was born on 4 February 1959. Ivania Martinich was born on 25 July "
            "1995. Thus, 4 February 1959 is earlier than 25 July 1995 and Martin Hodge was born first. "
            "So the answer is Martin Hodge.\n\n"
            "Question: When did the director of film Hypocrite (Film) die?\n"
            "Answer: The film Hypocrite was directed by Miguel Morayta. Miguel Morayta died on 19 "
            "June 2013. So the answer is 19 June 2013.\n\n")
    assert build_prompt(demos, "Q?") == head + "Answer in the same format as before. \nQuestion: Q?\nAnswer: "
    assert build_prompt(demos, "Q?", steps=["A was born in St. Louis", "B died"],
                        docs=["doc one", "doc two"]) == (
        head + "Context: [1] doc one\n[2] doc two\n"
        "Answer in the same format as before. \nQuestion: Q?\nAnswer: A was born in St  Louis. B died.")


def test_faithful_steps_delete_periods():
    assert format_step("Edward L. Cahn died", "fixed") == "Edward L  Cahn died."
    assert format_step("Edward L. Cahn died", "faithful") == "Edward L Cahn died."
    assert build_prompt([], "Q", steps=["x. y"], mode="faithful").endswith("Answer: x y.")


def test_stop_strings_per_mode():
    assert stop_strings(False, final=False) == ["\n\n", "\nQuestion:", "\nContext", ". "]
    assert stop_strings(True, final=False) == ["\n\n", "\nQuestion:", "\nContext", "\n", ". "]
    assert stop_strings(False, final=True) == ["\n\n", "\nQuestion:", "\nContext"]
    assert simple_qa_stops() == ["\n", "\n\n", "\nQuestion:", "\nContext"]


def test_self_aware_reasoning_variants():
    p, stops = read_all_steps_prompt([], "Q?", ["s1", "s2"])
    assert p == "Context: [1] s1\n[2] s2\nAnswer in the same format as before. \nQuestion: Q?\nAnswer: "
    assert stops == ["\n\n", "\nQuestion:", "\nContext", "\n"] and ". " not in stops
    p, stops = read_all_docs_prompt([], "Q?", ["d1"])
    assert p == "Context: [1] d1\nAnswer in the same format as before. \nQuestion: Q?\nAnswer: "
    assert stops == ["\n\n", "\nQuestion:", "\nContext"]


def test_every_registered_data_set_has_prompts_and_a_place_beside_the_paper():
    """The registry is the one family map: prompts, methods and the render step read it."""
    from seakr_repro.data.registry import DATASETS, paper_column
    from seakr_repro.prompts import DEMOS, dataset_family

    for name, spec in DATASETS.items():
        assert dataset_family(name) == spec.family and spec.family in DEMOS, name
    assert [paper_column(n) for n in ("bundled-2wiki", "bundled-single", "triviaqa", "fanoutqa")] == \
        ["2wiki", "nq", "triviaqa", "fanoutqa"]
    assert dataset_family("Bundled-HotpotQA") == "hotpotqa"
