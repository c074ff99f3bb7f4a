"""The U-evaluation the benchmarks time: a SeaKR-style few-shot prompt with realistic multi-hop
demonstrations, SeaKR's stop strings for a first, non-final step, and the profile's sampling
settings for it."""
from __future__ import annotations

from ..llm.sampling_settings import Sampling

# Realistic multi-hop demonstrations in SeaKR's format ("... So the answer is X.").
DEMOS = [
    ("Who was born first, Albert Einstein or Niels Bohr?",
     "Albert Einstein was born on 14 March 1879. Niels Bohr was born on 7 October 1885. "
     "Thus, Albert Einstein was born first", "Albert Einstein"),
    ("What is the capital of the country where the Eiffel Tower is located?",
     "The Eiffel Tower is located in France. The capital of France is Paris", "Paris"),
    ("Which river flows through the city where Mozart was born?",
     "Mozart was born in Salzburg. The Salzach river flows through Salzburg", "Salzach"),
    ("Who directed the film in which Tom Hanks played Forrest Gump?",
     "Tom Hanks played Forrest Gump in the film Forrest Gump. Forrest Gump was directed by "
     "Robert Zemeckis", "Robert Zemeckis"),
    ("In what year did the author of Pride and Prejudice die?",
     "Pride and Prejudice was written by Jane Austen. Jane Austen died in 1817", "1817"),
    ("Are the Amazon and the Nile both in Africa?",
     "The Nile is in Africa. The Amazon is in South America. Thus, they are not both in "
     "Africa", "no"),
    ("What language is spoken in the country whose capital is Lisbon?",
     "Lisbon is the capital of Portugal. The language spoken in Portugal is Portuguese",
     "Portuguese"),
    ("Which university did the founder of Microsoft attend?",
     "Microsoft was founded by Bill Gates and Paul Allen. Bill Gates attended Harvard "
     "University", "Harvard University"),
    ("Who composed the national anthem of the country where the Danube ends?",
     "The Danube ends in the Black Sea at Romania. The national anthem of Romania was "
     "composed by Anton Pann", "Anton Pann"),
    ("How many moons does the planet named after the Roman god of war have?",
     "The planet named after the Roman god of war is Mars. Mars has two moons", "two"),
]
QUESTION = "What is the nationality of the director of the film Jaws?"
STOP = ["\n\n", "\nQuestion:", "\nContext", ". "]   # SeaKR's stops for a first, non-final step


def build_prompt(n_shot: int = 10, question: str = QUESTION) -> str:
    """SeaKR-style few-shot prompt: demos, then the question and an empty answer."""
    demos = "".join(f"Question: {q}\nAnswer: {s}. So the answer is {a}.\n\n"
                    for q, s, a in DEMOS[:n_shot])
    return demos + f"Answer in the same format as before. \nQuestion: {question}\nAnswer:"


def sample_settings(cfg, n_layers: int, k: int) -> Sampling:
    """`Backend.sample`'s settings for one U-evaluation of `k` samples: the profile's
    uncertainty settings (its layer resolved for a model of `n_layers`), SeaKR's stops."""
    from ..llm.model_info import middle_layer

    layer_cfg = cfg.get("uncertainty.layer", "middle")
    return Sampling(k=k, max_new_tokens=int(cfg["uncertainty.max_tokens"]), stop=STOP,
                    temperature=float(cfg["uncertainty.temperature"]),
                    top_k=int(cfg["uncertainty.top_k"]), top_p=float(cfg["uncertainty.top_p"]),
                    seed=int(cfg.get("seed", Sampling.seed)),
                    layer=middle_layer(n_layers) if layer_cfg == "middle" else int(layer_cfg),
                    hook=cfg.get("uncertainty.hook", "mlp_out"))
