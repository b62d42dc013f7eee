"""grpo_lib.verl_bridge: the arithmetic task, our reward and our config handed to verl.

verl itself is not installed here (it needs a GPU, vLLM or SGLang, Ray): the export is
read back the way verl's ``RLHFDataset`` reads it (``datasets.load_dataset("parquet",
...)`` and the tokenizer's chat template), :func:`compute_score` is called the way
verl's ``NaiveRewardManager`` calls it (keywords, plus extras) and loaded the two ways
verl's ``load_module`` loads it (a file path, ``pkg://``), and the command's keys are
checked against verl 0.9.1's config when verl can be found (skipped otherwise).
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import math
import shlex
import time
from pathlib import Path

import pandas as pd
import pytest

from grpo_lib import rewards, verl_bridge
from grpo_lib.losses import LOSS_TYPES
from grpo_lib.rewards import accuracy_reward, combine_rewards, format_reward
from grpo_lib.tasks import load_task_split
from grpo_lib.trainer import GRPOConfig, load_config
from grpo_lib.verl_bridge import (FIXED_VERL_SETTINGS, NO_VERL_EQUIVALENT,
                                  NOT_A_VERL_SETTING, VERL_KEYS, compute_score,
                                  export_verl_parquet, hydra_value, knob_table,
                                  shell_command, verl_command, verl_overrides,
                                  verl_row)

ROOT = Path(__file__).resolve().parents[1]
BOOK_CONFIG = ROOT / "configs" / "r1_zero_arithmetic.yaml"
N_ROWS = 24
COLUMNS = ["data_source", "prompt", "ability", "reward_model", "extra_info"]


@pytest.fixture(scope="module")
def source():
    return load_task_split("arithmetic", "train")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("verl_data")
    return export_verl_parquet("arithmetic", "train", out, n=N_ROWS)


@pytest.fixture(scope="module")
def frame(exported):
    return pd.read_parquet(exported)


@pytest.fixture(scope="module")
def book():
    return load_config(BOOK_CONFIG)


def right(answer: str) -> str:
    return f"<think> working it out </think> <answer> {answer} </answer>"


def wrong(answer: str) -> str:
    return f"<think> working it out </think> <answer> {int(answer) + 1} </answer>"


# ============================================================================ export
def test_export_writes_verl_layout(exported, frame, source):
    assert exported.name == "train.parquet" and exported.is_file()
    assert list(frame.columns) == COLUMNS
    assert len(frame) == N_ROWS
    row, src = frame.iloc[3], source[3]
    assert row["data_source"] == "grpo_lib/arithmetic"
    assert row["ability"] == "math"
    assert [dict(m) for m in row["prompt"]] == src["prompt"]
    assert row["prompt"][0]["role"] == "user"
    assert src["question"] in row["prompt"][0]["content"]
    assert dict(row["reward_model"]) == {"style": "rule",
                                         "ground_truth": src["answer"]}
    assert dict(row["extra_info"]) == {"split": "train", "index": 3,
                                       "question": src["question"],
                                       "answer": src["answer"]}


def test_export_keeps_every_row_in_order(frame, source):
    gold = [rm["ground_truth"] for rm in frame["reward_model"]]
    assert gold == source["answer"][:N_ROWS]
    assert [e["index"] for e in frame["extra_info"]] == list(range(N_ROWS))
    assert [e["question"] for e in frame["extra_info"]] == source["question"][:N_ROWS]
    assert set(frame["data_source"]) == {"grpo_lib/arithmetic"}


def test_export_reads_back_the_way_verl_reads_it(exported, source, tmp_path):
    """verl's RLHFDataset: ``datasets.load_dataset("parquet", data_files=...)``."""
    datasets = pytest.importorskip("datasets")
    rows = datasets.load_dataset("parquet", data_files=str(exported),
                                 cache_dir=str(tmp_path))["train"]
    assert rows.column_names == COLUMNS and len(rows) == N_ROWS
    for i in (0, N_ROWS - 1):
        assert rows[i] == verl_row(source[i], "arithmetic", "train", i)
    assert rows.features["reward_model"]["ground_truth"].dtype == "string"


def test_export_prompt_renders_like_ours(frame, source):
    """verl renders ``prompt`` with the policy's chat template, as our sampler does."""
    import transformers

    path = ROOT / "data" / "models" / "tiny-qwen2-base"  # committed
    tokenizer = transformers.AutoTokenizer.from_pretrained(path)

    def render(messages):
        return tokenizer.apply_chat_template(list(messages), tokenize=False,
                                             add_generation_prompt=True)

    for i in (0, 7):
        exported_prompt = [dict(m) for m in frame.iloc[i]["prompt"]]
        assert render(exported_prompt) == render(source[i]["prompt"])


def test_export_whole_test_split(tmp_path):
    path = export_verl_parquet("arithmetic", "test", tmp_path)
    test = load_task_split("arithmetic", "test")
    rows = pd.read_parquet(path)
    assert path == tmp_path / "test.parquet"
    assert len(rows) == len(test) > N_ROWS
    assert {e["split"] for e in rows["extra_info"]} == {"test"}
    assert rows.iloc[-1]["reward_model"]["ground_truth"] == test[-1]["answer"]


def test_export_other_task_names_its_source(tmp_path):
    rows = pd.read_parquet(export_verl_parquet("arithmetic_zh", "train", tmp_path, 3))
    assert set(rows["data_source"]) == {"grpo_lib/arithmetic_zh"}
    zh = load_task_split("arithmetic_zh", "train")
    assert rows.iloc[2]["prompt"][0]["content"] == zh[2]["prompt"][0]["content"]


@pytest.mark.parametrize("n", [0, -3, True, 2.5, "5"])
def test_export_refuses_a_bad_row_count(tmp_path, n):
    with pytest.raises(ValueError, match="positive number of rows"):
        export_verl_parquet("arithmetic", "train", tmp_path, n=n)
    assert not (tmp_path / "train.parquet").exists()


def test_export_refuses_an_unknown_task(tmp_path):
    with pytest.raises(ValueError, match="unknown task"):
        export_verl_parquet("no_such_task", "train", tmp_path, n=2)


def test_verl_row_names_missing_columns():
    with pytest.raises(KeyError, match="missing \\['prompt'\\]"):
        verl_row({"question": "1 + 1", "answer": "2"}, "arithmetic", "train", 0)


# ============================================================================ reward
def verl_call(row, solution_str, **extra):
    """Call compute_score the way verl 0.9.1's NaiveRewardManager.run_single does."""
    extra_info = dict(row["extra_info"])
    extra_info.update(num_turns=None, rollout_reward_scores={})
    return compute_score(data_source=row["data_source"], solution_str=solution_str,
                         ground_truth=row["reward_model"]["ground_truth"],
                         extra_info=extra_info, **extra)


def test_compute_score_on_exported_rows(frame):
    for _, row in frame.iterrows():
        gold = row["reward_model"]["ground_truth"]
        assert verl_call(row, right(gold)) == pytest.approx(1.1)
        assert verl_call(row, wrong(gold)) == pytest.approx(0.1)
        assert verl_call(row, f"<answer> {gold} </answer>") == pytest.approx(1.0)
        assert verl_call(row, f"the answer is {gold}") == 0.0


def test_compute_score_is_the_books_combined_reward(frame):
    book_reward = combine_rewards([accuracy_reward, format_reward], [1.0, 0.1])
    gold = frame.iloc[0]["reward_model"]["ground_truth"]
    texts = [right(gold), wrong(gold), f"<answer>{gold}</answer>", "", gold,
             f"<think> x </think> <answer> {gold} </answer> trailing text"]
    expected = book_reward(texts, answer=[gold] * len(texts))
    got = [compute_score("grpo_lib/arithmetic", t, gold) for t in texts]
    assert got == pytest.approx(expected)
    assert len(set(got)) >= 3  # the cases do separate the scores


def test_compute_score_takes_verls_extra_keywords(frame):
    row = frame.iloc[0]
    gold = row["reward_model"]["ground_truth"]
    score = verl_call(row, right(gold), reward_router_address=None,
                      reward_model_tokenizer=None, method="strict")
    assert score == pytest.approx(1.1)
    assert compute_score("grpo_lib/arithmetic", right(gold), gold) == score


ADVERSARIAL = [
    "<answer>9**9**9**9</answer>",
    "<think> x </think> <answer> 9**9**9**9 </answer>",
    "",
    None,
    12,
    ["<answer> 12 </answer>"],
    "<answer>" + "9" * 200_000 + "</answer>",
    "<think>" * 100_000,
    "<answer>" + "(" * 5_000 + "1" + ")" * 5_000 + "</answer>",
    "<answer>1e999999</answer>",
    "<answer>nan</answer>",
    "<answer>-inf</answer>",
    "<answer>\\frac{9^{9^{9^{9}}}}{1}</answer>",
    "<answer>" + "\\frac{1}{2}" * 2_000 + "</answer>",
    "\x00" * 10_000,
    "<think>" + "a " * 500_000 + "</think><answer>1</answer>",
]
GOLDS = ["12", None, "", "nan", 12, float("nan"), object()]


@pytest.fixture(scope="module")
def warm():
    """Load math_verify's sympy once, so the timings below measure the parsing."""
    compute_score("grpo_lib/arithmetic", "<answer>\\frac{1}{2}</answer>", "0.5")


@pytest.mark.parametrize("text", ADVERSARIAL, ids=lambda t: repr(t)[:30])
def test_compute_score_survives_adversarial_completions(warm, text):
    for gold in GOLDS:
        start = time.perf_counter()
        score = compute_score("grpo_lib/arithmetic", text, gold, None)
        elapsed = time.perf_counter() - start
        assert isinstance(score, float) and math.isfinite(score)
        assert 0.0 <= score <= 1.1
        assert score < 1.0  # none of them is a right, tagged answer
        assert elapsed < 3.0, f"{elapsed:.2f} s for {text!r:.40} / {gold!r}"


def test_compute_score_reads_bytes_and_unicode_digits():
    assert compute_score("grpo_lib/arithmetic", right("12").encode(), "12") == \
        pytest.approx(1.1)
    assert compute_score("grpo_lib/arithmetic", right("１２"), "12") == \
        pytest.approx(1.1)


def test_compute_score_with_nothing_passed():
    assert compute_score() == 0.0
    assert compute_score(None, None, None, None) == 0.0


def test_compute_score_never_raises_when_a_reward_breaks(monkeypatch):
    def boom(completions, **columns):
        raise RuntimeError("a broken reward")

    monkeypatch.setattr(rewards, "accuracy_reward", boom)
    assert compute_score("grpo_lib/arithmetic", right("12"), "12") == \
        pytest.approx(0.1)
    monkeypatch.setattr(rewards, "format_reward", lambda c, **k: [float("nan")])
    assert compute_score("grpo_lib/arithmetic", right("12"), "12") == 0.0


def test_compute_score_loads_the_ways_verl_loads_it():
    """verl's load_module: a file path (spec_from_file_location) or pkg://..."""
    path = Path(verl_bridge.__file__)
    spec = importlib.util.spec_from_file_location("custom_module_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.compute_score("grpo_lib/arithmetic", right("7"), "7") == \
        pytest.approx(1.1)
    name = verl_bridge.DEFAULT_REWARD_PATH.removeprefix("pkg://")
    assert importlib.import_module(name).compute_score is compute_score


# =========================================================================== command
def parse(argv):
    """``key=value`` overrides -> {key: value text}; each key once."""
    pairs = [a.split("=", 1) for a in argv[3:]]
    keys = [k for k, _ in pairs]
    assert len(keys) == len(set(keys)), "a key is set twice"
    return dict(pairs)


def test_command_for_the_book_config(book):
    argv = verl_command(book, data_dir="data/verl/arithmetic")
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    assert argv[3] == "algorithm.adv_estimator=grpo"
    args = parse(argv)
    assert set(args) == set(VERL_KEYS) | set(FIXED_VERL_SETTINGS)
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    expected = {
        "data.train_files": "data/verl/arithmetic/train.parquet",
        "data.val_files": "data/verl/arithmetic/test.parquet",
        "reward.custom_reward_function.path": "pkg://grpo_lib.verl_bridge",
        "reward.custom_reward_function.name": "compute_score",
        "actor_rollout_ref.model.path": book.model_name_or_path,
        "data.train_batch_size": str(book.per_step_prompts),
        f"{actor}.ppo_mini_batch_size": str(book.per_step_prompts),
        f"{rollout}.n": str(book.num_generations),
        "data.max_response_length": str(book.max_completion_length),
        f"{rollout}.temperature": repr(book.temperature),
        f"{rollout}.top_p": repr(book.top_p),
        "algorithm.norm_adv_by_std_in_grpo": "True",
        f"{actor}.loss_agg_mode": "seq-mean-token-mean",
        f"{actor}.policy_loss.loss_mode": "vanilla",
        f"{actor}.use_kl_loss": "False",
        f"{actor}.clip_ratio": repr(book.epsilon),
        f"{actor}.clip_ratio_low": repr(book.epsilon),
        f"{actor}.clip_ratio_high": repr(book.epsilon),
        f"{actor}.ppo_epochs": str(book.num_iterations),
        f"{actor}.optim.lr": repr(book.learning_rate),
        f"{actor}.optim.lr_scheduler_type": book.lr_scheduler_type,
        f"{actor}.optim.lr_warmup_steps": str(int(book.warmup_steps)),
        f"{actor}.optim.weight_decay": repr(float(book.weight_decay)),
        f"{actor}.optim.betas": f"[{book.adam_beta1!r},{book.adam_beta2!r}]",
        f"{actor}.optim.clip_grad": repr(book.max_grad_norm),
        f"{actor}.ppo_micro_batch_size_per_gpu": str(book.micro_batch_size),
        "trainer.total_training_steps": str(book.max_steps),
        "data.seed": str(book.seed),
        "trainer.default_local_dir": book.output_dir,
        "trainer.save_freq": str(book.save_every),
        "trainer.test_freq": str(book.eval_every),
        "trainer.val_before_train": str(book.eval_on_start),
        "data.val_max_samples": str(book.eval_n),
        "trainer.resume_mode": "disable",
        f"{rollout}.name": "vllm",
        "trainer.n_gpus_per_node": "1",
    }
    assert {k: args[k] for k in expected} == expected
    # the book's numbers, written out, so a change to the YAML is seen here too
    assert (args["data.train_batch_size"], args[f"{rollout}.n"],
            args[f"{actor}.optim.lr"]) == ("16", "8", "0.0005")


def test_overrides_are_typed_values(book):
    values = verl_overrides(book)
    assert set(VERL_KEYS) <= set(values)
    actor = "actor_rollout_ref.actor"
    typed = {  # the book's config (configs/r1_zero_arithmetic.yaml), as verl reads it
        "data.train_batch_size": 16, "actor_rollout_ref.rollout.n": 8,
        "data.max_response_length": 96, f"{actor}.clip_ratio_high": 0.2,
        f"{actor}.loss_agg_mode": "seq-mean-token-mean", f"{actor}.optim.lr": 5e-4,
        f"{actor}.use_kl_loss": False, "algorithm.norm_adv_by_std_in_grpo": True,
        "trainer.total_training_steps": 150, "trainer.logger": ["console"]}
    assert {key: values[key] for key in typed} == typed
    assert all(type(values[key]) is type(value) for key, value in typed.items())
    assert values["actor_rollout_ref.rollout.ignore_eos"] is False
    assert values["algorithm.rollout_correction.rollout_is"] is None
    assert values["actor_rollout_ref.actor.optim.betas"] == [0.9, 0.999]


def test_every_config_field_has_one_place():
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    mapped = {m.ours for m in VERL_KEYS.values()}
    mapped |= {r for m in VERL_KEYS.values() for r in m.reads}
    refused, elsewhere = set(NO_VERL_EQUIVALENT), set(NOT_A_VERL_SETTING)
    assert mapped | refused | elsewhere == fields, "a knob has no verl mapping"
    assert not (mapped & refused or mapped & elsewhere or refused & elsewhere)
    assert all(why for _, why in NO_VERL_EQUIVALENT.values())
    assert all(NOT_A_VERL_SETTING.values())
    assert not set(VERL_KEYS) & set(FIXED_VERL_SETTINGS)


@pytest.mark.parametrize("loss_type", [t for t in LOSS_TYPES
                                       if t not in ("cispo", "sapo", "luspo",
                                                    "vespo")])
def test_each_loss_type_has_a_verl_aggregation(book, loss_type):
    config = dataclasses.replace(book, loss_type=loss_type)
    values = verl_overrides(config)
    expected = {"grpo": ("seq-mean-token-mean", "vanilla", None),
                "bnpo": ("token-mean", "vanilla", None),
                "dr_grpo": ("seq-mean-token-sum-norm", "vanilla",
                            book.max_completion_length),
                "dapo": ("token-mean", "vanilla", None),
                "reinforce": ("seq-mean-token-sum", "gpg", None)}[loss_type]
    actor = "actor_rollout_ref.actor"
    assert (values[f"{actor}.loss_agg_mode"], values[f"{actor}.policy_loss.loss_mode"],
            values[f"{actor}.loss_scale_factor"]) == expected


def test_gspo_maps_to_verl_gspo_and_cispo_is_refused(book):
    config = dataclasses.replace(book, importance_sampling_level="sequence")
    values = verl_overrides(config)
    assert values["actor_rollout_ref.actor.policy_loss.loss_mode"] == "gspo"
    config = dataclasses.replace(book, loss_type="cispo", epsilon_high=5.0)
    with pytest.raises(ValueError, match="loss_type='cispo': not mapped to verl"):
        verl_overrides(config)
    for loss_type in ("luspo", "vespo"):
        config = dataclasses.replace(book, loss_type=loss_type)
        with pytest.raises(ValueError, match=f"'{loss_type}': not mapped to verl"):
            verl_overrides(config)
    config = dataclasses.replace(book, loss_type="sapo")
    with pytest.raises(ValueError, match="loss_type='sapo': not mapped to verl"):
        verl_overrides(config)


def test_delta_is_verls_dual_clip(book):
    key = "actor_rollout_ref.actor.clip_ratio_c"
    assert verl_overrides(book)[key] == 3.0  # verl's default, which it always applies
    assert verl_overrides(dataclasses.replace(book, delta=4.0))[key] == 4.0


def test_knobs_that_change_several_keys(book):
    config = dataclasses.replace(
        book, beta=0.04, use_bias_correction_kl=False, epsilon_high=0.28,
        scale_rewards="none", num_iterations=2, warmup_steps=5, save_every=0,
        eval_every=0, micro_batch_size=None, dynamic_sampling=True,
        resume_from_checkpoint="latest")
    args = parse(verl_command(config))
    actor = "actor_rollout_ref.actor"
    assert args[f"{actor}.use_kl_loss"] == "True"
    assert args[f"{actor}.kl_loss_coef"] == "0.04"
    assert (args[f"{actor}.clip_ratio_low"], args[f"{actor}.clip_ratio_high"]) == \
        ("0.2", "0.28")
    assert args["algorithm.norm_adv_by_std_in_grpo"] == "False"
    assert args[f"{actor}.ppo_epochs"] == "2"
    assert args[f"{actor}.optim.lr_warmup_steps"] == "3"  # 5 updates / μ=2, up
    assert args["trainer.save_freq"] == str(book.max_steps)  # save_final only
    assert args["trainer.test_freq"] == "-1"
    assert args[f"{actor}.ppo_micro_batch_size_per_gpu"] == "128"  # 16 x 8
    assert args["algorithm.filter_groups.enable"] == "True"
    assert args["trainer.resume_mode"] == "auto"
    ratio = parse(verl_command(dataclasses.replace(book, warmup_steps=0.1)))
    assert ratio[f"{actor}.optim.lr_warmup_steps"] == "-1"
    assert ratio[f"{actor}.optim.lr_warmup_steps_ratio"] == "0.1"


def test_sampling_correction_becomes_rollout_correction(book):
    base = dataclasses.replace(book, sampling_correction=True, rollout_engine="fast")
    mask = verl_overrides(dataclasses.replace(base, sampling_correction_clip_min=0.5))
    assert mask["algorithm.rollout_correction.rollout_is"] == "sequence"
    assert mask["algorithm.rollout_correction.rollout_is_threshold"] == "0.5_3.0"
    assert "'0.5_3.0'" in " ".join(verl_command(
        dataclasses.replace(base, sampling_correction_clip_min=0.5)))
    tis = verl_overrides(dataclasses.replace(
        base, sampling_correction_mode="token_truncate",
        sampling_correction_clip_max=2.0))
    assert tis["algorithm.rollout_correction.rollout_is"] == "token"
    assert tis["algorithm.rollout_correction.rollout_is_threshold"] == 2.0
    with pytest.raises(ValueError, match="needs 0 < min < max"):
        verl_overrides(base)  # sequence_mask with no lower bound


REFUSED = [
    ({"reward_weights": None}, "reward_weights=None"),
    ({"reward_funcs": ["accuracy_reward"], "reward_weights": [1.0]}, "accuracy + 0.1"),
    ({"scale_rewards": "batch"}, "scale_rewards='batch'"),
    ({"lr_scheduler_type": "linear"}, "constant and cosine"),
    ({"max_grad_norm": 0.0}, "verl always clips"),
    ({"prompt_format": "r1_zero"}, "prompt_format='chat'"),
    ({"mask_truncated_completions": True}, "mask_truncated_completions=True"),
    ({"multi_objective_aggregation": "normalize_then_sum"}, "gdpo"),
    ({"beta": 0.04}, "use_bias_correction_kl=False"),
    ({"device": "cpu"}, "verl trains on GPUs"),
    ({"resume_from_checkpoint": "runs/x/checkpoint-50"}, "global_step_<N>"),
    ({"model_dtype": "auto"}, "model_dtype='auto'"),
    ({"top_entropy_quantile": 0.2}, "no high-entropy token mask"),
    ({"off_policy_mask_threshold": 0.5}, "no off-policy sequence mask"),
    ({"num_mini_batches": 2, "shuffle_mini_batches": True}, "(data.split;"),
    ({"beta": 0.04, "use_bias_correction_kl": False, "sync_ref_model": True},
     "no reference sync"),
]


@pytest.mark.parametrize("changes, message", REFUSED, ids=lambda v: str(v)[:40])
def test_refuses_what_verl_cannot_run(book, changes, message):
    with pytest.raises(ValueError, match="would not run this config") as err:
        verl_command(dataclasses.replace(book, **changes))
    assert message in str(err.value)


def test_refusals_are_listed_together(book):
    config = dataclasses.replace(book, scale_rewards="batch", max_grad_norm=0.0,
                                 prompt_format="r1_zero")
    with pytest.raises(ValueError) as err:
        verl_overrides(config)
    lines = [ln for ln in str(err.value).splitlines() if ln.startswith("  - ")]
    assert len(lines) == 3


def test_invalid_config_is_refused_before_mapping(book):
    with pytest.raises(ValueError, match="num_generations"):
        verl_command(dataclasses.replace(book, num_generations=1))


@pytest.mark.parametrize("where, mode, path", [
    (None, "disable", None), ("latest", "auto", None),
    ("ckpt/global_step_50", "resume_path", "ckpt/global_step_50")])
def test_resume(book, where, mode, path):
    values = verl_overrides(dataclasses.replace(book, resume_from_checkpoint=where))
    assert values["trainer.resume_mode"] == mode
    assert values["trainer.resume_from_path"] == path


def test_own_reward_function_lifts_the_reward_check(book):
    config = dataclasses.replace(book, reward_funcs=["accuracy_reward"],
                                 reward_weights=None)
    args = parse(verl_command(config, reward_path="/abs/my_reward.py",
                              reward_name="my_score"))
    assert args["reward.custom_reward_function.path"] == "/abs/my_reward.py"
    assert args["reward.custom_reward_function.name"] == "my_score"


def test_overrides(book):
    extra = {"actor_rollout_ref.rollout.gpu_memory_utilization": 0.4,
             "trainer.logger": ["console", "wandb"]}
    args = parse(verl_command(book, overrides=extra))
    assert args["actor_rollout_ref.rollout.gpu_memory_utilization"] == "0.4"
    assert args["trainer.logger"] == "[console,wandb]"
    with pytest.raises(ValueError, match="comes from our config's num_generations"):
        verl_command(book, overrides={"actor_rollout_ref.rollout.n": 4})


def test_default_data_dir_follows_the_task(book):
    args = parse(verl_command(dataclasses.replace(book, task="arithmetic_zh")))
    assert args["data.train_files"] == "data/verl/arithmetic_zh/train.parquet"


@pytest.mark.parametrize("value, text", [
    (None, "null"), (True, "True"), (False, "False"), (16, "16"), (5e-4, "0.0005"),
    (1e-6, "1e-06"), ([0.9, 0.999], "[0.9,0.999]"), (["console"], "[console]"),
    ("seq-mean-token-mean", "seq-mean-token-mean"),
    ("pkg://grpo_lib.verl_bridge", "pkg://grpo_lib.verl_bridge"),
    ("data/verl/train.parquet", "data/verl/train.parquet"),
    ("0.5_3.0", "'0.5_3.0'"), ("null", "'null'"), ("True", "'True'"),
    ("my run", "'my run'"), ("it's", "'it\\'s'"), ("~/data", "'~/data'"),
])
def test_hydra_value(value, text):
    assert hydra_value(value) == text


def test_hydra_value_refuses_infinity():
    with pytest.raises(ValueError, match="finite"):
        hydra_value(float("inf"))


def test_shell_command_splits_back_into_the_arguments(book):
    argv = verl_command(dataclasses.replace(book, output_dir="runs/my run"))
    text = shell_command(argv)
    assert text.startswith("python3 -m verl.trainer.main_ppo \\\n    ")
    assert shlex.split(text.replace("\\\n", " ")) == argv


def test_knob_table(book):
    table = knob_table(book)
    assert list(table.columns) == ["kind", "ours", "verl", "value", "note"]
    counts = table["kind"].value_counts().to_dict()
    assert counts == {"mapped": len(VERL_KEYS), "fixed": len(FIXED_VERL_SETTINGS),
                      "refused": len(NO_VERL_EQUIVALENT),
                      "elsewhere": len(NOT_A_VERL_SETTING)}
    lr = table[table["verl"] == "actor_rollout_ref.actor.optim.lr"].iloc[0]
    assert (lr["ours"], lr["value"]) == ("learning_rate", book.learning_rate)
    assert "value" not in knob_table().columns


def test_keys_exist_in_verls_config():
    """Every key the command sets is in verl's flattened trainer config (needs verl;
    the bridge was read against 0.9.1)."""
    spec = importlib.util.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("verl is not installed (it needs a GPU stack)")
    yaml = pytest.importorskip("yaml")
    folder = Path(list(spec.submodule_search_locations)[0])
    config = yaml.safe_load((folder / "trainer" / "config" /
                             "_generated_ppo_trainer.yaml").read_text())
    missing = []
    for key in [*VERL_KEYS, *FIXED_VERL_SETTINGS]:
        node = config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(key)
                break
            node = node[part]
    assert not missing, f"not in verl's ppo_trainer config: {missing}"
