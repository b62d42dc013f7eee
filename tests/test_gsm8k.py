"""grpo_lib.tasks.gsm8k: GSM8K rows in the book's layout, and a clear error offline
(the hub is out of reach here, so the loader is tested on rows shaped like the hub's)."""
import time
from pathlib import Path

import datasets
import pytest

from grpo_lib.rewards import accuracy_reward
from grpo_lib.tasks import gsm8k, load_task_split
from grpo_lib.trainer import load_config

ROOT = Path(__file__).resolve().parents[1]
HUB_ROWS = [  # the layout of openai/gsm8k (config "main")
    {"question": "Natalia sold clips to 48 of her friends in April, and then she sold "
                 "half as many clips in May. How many clips did Natalia sell "
                 "altogether in April and May?",
     "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold "
               "48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72"},
    {"question": "A shop sold 1,200 pens at $2 each. How much money did it take in?",
     "answer": "1,200 * 2 = <<1200*2=2400>>2,400\n#### 2,400"},
]


@pytest.mark.parametrize("solution, final", [
    ("... \n#### 72", "72"), ("x\n#### 2,400", "2400"), ("y\n####  -3 ", "-3"),
    ("z\n#### $5", "5"), ("w\n#### 0.5", "0.5"),
])
def test_final_answer(solution, final):
    assert gsm8k.final_answer(solution) == final


def test_a_solution_without_its_final_line_is_refused():
    for bad in ("no final line here", "#### ", "#### 5\n6"):
        with pytest.raises(ValueError, match="#### <answer>"):
            gsm8k.final_answer(bad)
    with pytest.raises(ValueError, match="is text, got NoneType"):
        gsm8k.final_answer(None)
    long = "#### x" + " " * 64_000 + "y"  # a regex took 44 s on it
    start = time.perf_counter()
    assert gsm8k.final_answer(long).startswith("x")
    assert time.perf_counter() - start < 5


def test_rows_are_book_rows_that_the_rewards_score(monkeypatch):
    calls = []

    def fake_load_dataset(name, config, split):
        calls.append((name, config, split))
        return datasets.Dataset.from_list(HUB_ROWS)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = load_task_split("gsm8k", "test")
    assert calls == [("openai/gsm8k", "main", "test")]
    assert rows.column_names == ["question", "answer", "solution", "prompt"]
    assert [r["answer"] for r in rows] == ["72", "2400"]
    system, user = rows[0]["prompt"]
    assert system["role"] == "system" and "<answer>" in system["content"]
    assert user == {"role": "user", "content": HUB_ROWS[0]["question"]}
    scores = accuracy_reward(["<think> 48 + 24 </think> <answer> 72 </answer>",
                              "<think> 1200 * 2 </think> <answer> 2400 </answer>"],
                             answer=list(rows["answer"]))
    assert scores == [1.0, 1.0]


def test_no_hub_is_one_clear_error(monkeypatch):
    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(OSError, match="Hugging Face hub.*HF_DATASETS_OFFLINE"):
        load_task_split("gsm8k", "train")
    with pytest.raises(ValueError, match="'train' and 'test'"):
        load_task_split("gsm8k", "validation")


def test_the_recipe_config_is_valid():
    config = load_config(ROOT / "configs" / "qwen25_gsm8k.yaml")
    assert (config.model_name_or_path, config.task) == ("Qwen/Qwen2.5-0.5B-Instruct",
                                                        "gsm8k")
    assert config.batch_size == 128 and config.max_completion_length == 512
