"""Settings are checked when loaded: params/base.yaml is the schema for profile files and overrides."""
import shutil

import pytest
import yaml

from seakr_repro.core import config
from seakr_repro.core.config import DECLARED_TYPES, list_profiles, load_config
from seakr_repro.core.errors import UserError
from seakr_repro.core.paths import PARAMS_DIR


@pytest.fixture
def params(tmp_path):
    """A copy of params/ to add profiles to."""
    out = tmp_path / "params"
    shutil.copytree(PARAMS_DIR, out)
    return out


def _flat(node, prefix=""):
    for key, value in node.items():
        if isinstance(value, dict) and value and f"{prefix}{key}" not in config.OPEN_MAPPINGS:
            yield from _flat(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("profile", list_profiles())
def test_every_shipped_profile_passes_the_check(profile):
    cfg = load_config(profile)
    assert cfg["profile"] == profile and isinstance(cfg["description"], str) and cfg["description"]


def test_profiles_are_the_yaml_files(params):
    assert set(list_profiles()) == {p.stem for p in PARAMS_DIR.glob("*.yaml")} - {"base"}
    (params / "mine.yaml").write_text("extends: smoke\n")
    assert "mine" in list_profiles(params) and "base" not in list_profiles(params)


def test_null_and_union_keys_of_base_have_a_declared_type():
    base = dict(_flat(yaml.safe_load((PARAMS_DIR / "base.yaml").read_text())))
    undeclared = [k for k, v in base.items() if v is None and k not in DECLARED_TYPES]
    assert not undeclared, f"declare the types of {undeclared} in config.DECLARED_TYPES"
    stale = [k for k in DECLARED_TYPES if k not in base]
    assert not stale, f"DECLARED_TYPES names keys base.yaml lacks: {stale}"


@pytest.mark.parametrize("override, words", [
    ({"no.such.key": 1}, ["no.such.key", "base.yaml"]),
    ({"uncertainty.kk": 5}, ["uncertainty.kk", "uncertainty.k, the nearest"]),
    ({"k": 5}, ["uncertainty.k, the nearest"]),
    ({"uncertainty.k": "five"}, ["uncertainty.k", "an integer"]),
    ({"uncertainty.layer": "top"}, ["an integer or 'middle'"]),
    ({"cache.enabled": 1}, ["true or false"]),
    ({"model": 3}, ["'model' is a section"]),
    ({"model.paths.selfrag-llama2-7b": 7}, ["model.paths.selfrag-llama2-7b", "string"]),
    ({"datasets.simple": ["nq", "trivia"]}, ["trivia", "triviaqa"]),
    ({"notebooks.04-complx-qa.N_QUESTIONS": 4}, ["04-complx-qa", "04-complex-qa"]),
    ({"notebooks.10-seed-methods.N_TRAINS": 4}, ["N_TRAINS", "N_TRAIN"]),
])
def test_a_bad_override_is_refused_with_the_key_and_the_fix(override, words):
    with pytest.raises(UserError) as err:
        load_config("smoke", override)
    text = err.value.paragraph()
    assert "--set" in text and "Fix:" in text
    for word in words:
        assert word in text


@pytest.mark.parametrize("override", [
    {"uncertainty.layer": 15}, {"uncertainty.layer": "middle"}, {"uncertainty.delta": -6},
    {"datasets.n_questions": None}, {"datasets.n_questions": 100}, {"model.path": "/models/llama"},
    {"model.paths.selfrag-llama2-7b": "/models/selfrag"}, {"model.vllm": {"max_num_seqs": 64}},
    {"notebooks.04-complex-qa.N_QUESTIONS": 4}, {"analysis.datasets": ["2wiki", "nq"]},
    {"description": "mine"}, {"profile": "smoke"},
])
def test_good_overrides_pass(override):
    cfg = load_config("smoke", override)
    key, value = next(iter(override.items()))
    assert cfg[key] == value


def test_seakr_overrides_are_checked_and_named(monkeypatch):
    monkeypatch.setenv(config.OVERRIDES_ENV, '{"uncertainty.kay": 3}')
    with pytest.raises(UserError, match="SEAKR_OVERRIDES.*uncertainty.k, the nearest"):
        load_config("smoke")


def test_with_overrides_checks_too():
    with pytest.raises(UserError, match="retrieval.topn"):
        load_config("smoke").with_overrides({"retrieval.topn": 3})


def test_a_wrong_type_in_a_profile_file_names_the_file_and_line(params):
    (params / "bad.yaml").write_text('extends: smoke\ndescription: "typo"\nuncertainty:\n  temperature: 1.0\n'
                                     '  k: five\n')
    with pytest.raises(UserError) as err:
        load_config("bad", params_dir=params)
    e = err.value
    assert e.path.endswith("bad.yaml") and e.line == 5 and e.setting == "uncertainty.k"
    assert "a string ('five')" in e.paragraph() and "an integer" in e.paragraph()


def test_an_unknown_key_in_a_profile_file_names_the_line_and_the_nearest_key(params):
    (params / "bad.yaml").write_text("seakr:\n  n_shot: 2\n  max_reasoning_step: 3\n")
    with pytest.raises(UserError) as err:
        load_config("bad", params_dir=params)
    assert err.value.line == 3 and "seakr.max_reasoning_steps, the nearest" in err.value.paragraph()


def test_a_typo_in_a_parent_profile_is_found_through_extends(params):
    (params / "parent.yaml").write_text("retrieval:\n  topn: 3\n")
    (params / "child.yaml").write_text("extends: parent\n")
    with pytest.raises(UserError) as err:
        load_config("child", params_dir=params)
    assert err.value.path.endswith("parent.yaml") and err.value.line == 2


def test_extends_description_and_profile_keys_still_work(params):
    (params / "child.yaml").write_text('extends: smoke\ndescription: "mine"\nprofile: child\n'
                                       "uncertainty:\n  k: 6\nmodel:\n  paths: {llama-3-8b: /m/l3}\n"
                                       "notebooks:\n  04-complex-qa: {N_QUESTIONS: 2}\n")
    cfg = load_config("child", params_dir=params)
    smoke = load_config("smoke")
    assert cfg["uncertainty.k"] == 6 and cfg["uncertainty.max_tokens"] == smoke["uncertainty.max_tokens"]
    assert cfg["description"] == "mine" and cfg["profile"] == "child"
    assert cfg["model.paths"] == {"llama-3-8b": "/m/l3"}
    assert cfg["notebooks"]["04-complex-qa"] == {"N_QUESTIONS": 2}
    assert cfg["notebooks"]["10-seed-methods"] == smoke["notebooks"]["10-seed-methods"]   # merged


def test_a_notebook_section_naming_a_missing_parameter_fails(params):
    (params / "bad.yaml").write_text("notebooks:\n  04-complex-qa: {N_QUESTION: 1}\n")
    with pytest.raises(UserError) as err:
        load_config("bad", params_dir=params)
    assert err.value.line == 2 and "N_QUESTIONS" in err.value.paragraph()


def test_a_wrong_declared_type_in_base_itself_fails(params):
    text = (params / "base.yaml").read_text().replace("  n_questions: null               # null = all",
                                                      "  n_questions: all                # null = all")
    (params / "base.yaml").write_text(text)
    with pytest.raises(UserError, match="datasets.n_questions"):
        load_config("smoke", params_dir=params)


def test_base_yaml_states_the_code_constants():
    """SeaKR's constants have one definition in the code; base.yaml repeats them for users."""
    from seakr_repro.llm.sampling_settings import Sampling
    from seakr_repro.uncertainty.eigenscore import OFFICIAL_DELTA

    base = yaml.safe_load((PARAMS_DIR / "base.yaml").read_text())
    u, s = base["uncertainty"], Sampling(max_new_tokens=1)
    assert (u["k"], u["temperature"], u["top_k"], u["top_p"], u["hook"], u["forced_eos"]) == (
        s.k, s.temperature, s.top_k, s.top_p, s.hook, s.forced_eos)
    assert base["seed"] == s.seed and u["delta"] == OFFICIAL_DELTA


def test_runner_engine_is_one_the_engine_module_opens():
    """One list of engines (core.setting_choices): each one the schema accepts, runs.engine_choice
    opens; an unknown one is refused by the schema, naming them."""
    from seakr_repro.core.setting_choices import ENGINES
    from seakr_repro.runs.engine_choice import engine_of

    for name in ENGINES:
        assert engine_of(load_config("smoke", {"runner.engine": name})) == name
    with pytest.raises(UserError) as err:
        load_config("smoke", {"runner.engine": "dask"})
    assert "runner.engine" in err.value.paragraph() and "'local' or 'ray'" in err.value.paragraph()
    with pytest.raises(UserError) as err:             # a config the schema did not check
        engine_of({"runner.engine": "dask"})
    assert "use local (this process) or ray (Ray workers, one model each)" in err.value.paragraph()
