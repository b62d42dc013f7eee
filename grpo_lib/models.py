"""The book's models: a Qwen-style tokenizer, Qwen2 configs by size, loading by name or
path.

Every model in the book is a ``transformers.Qwen2ForCausalLM``. The tiny ones are built
and pretrained here (no hub needed); a real checkpoint such as
``Qwen/Qwen2.5-0.5B-Instruct`` loads through the same :func:`load_model_and_tokenizer`
where a hub (or a local copy) is available — the model is one setting.
"""
from __future__ import annotations

import functools
from pathlib import Path

import torch

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Qwen2's pre-tokenizer regex: letters in runs, every digit on its own (\p{N}),
# punctuation runs with an optional leading space, newlines, whitespace.
QWEN_SPLIT_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# ChatML as in Qwen2.5, without Qwen's default system prompt (a tiny model has no use
# for "You are Qwen, created by Alibaba Cloud"): a system message is rendered only if
# given.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)

MODEL_SIZES = {
    # name: Qwen2Config overrides. Parameter counts are printed by `describe_model`.
    "micro": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=2, num_key_value_heads=1),
    "mini": dict(hidden_size=64, intermediate_size=256, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2),
    "tiny": dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2),
    "small": dict(hidden_size=448, intermediate_size=1536, num_hidden_layers=8,
                  num_attention_heads=7, num_key_value_heads=1),
}


def _tokenizer_training_text(n_docs: int = 4000, seed: int = 1234,
                             task: str = "arithmetic") -> list[str]:
    """Text the BPE merges are learned from: corpus documents, chat pairs, the
    alphabet (``task="countdown"``: the Countdown corpus's documents)."""
    from .corpus import CHAT_PAIRS, WORDS_ZH, sample_documents
    from .tasks.arithmetic import R1_ZERO_TEMPLATE, make_problems

    if task == "countdown":
        from .countdown_corpus import countdown_documents
        from .tasks.countdown import make_problems as countdown_problems

        docs = countdown_documents(countdown_problems(500, seed=seed), n_docs // 4,
                                   seed=seed)
        return ([d["prompt"][0]["content"] for d in docs]
                + [d["response"] for d in docs] + ["user assistant system\n"] * 200)
    if task != "arithmetic":
        raise ValueError(f"no tokenizer corpus for task {task!r}; choose arithmetic "
                         f"or countdown")
    problems = make_problems(1500, seed=seed)
    texts = []
    for doc in sample_documents(problems, n_docs, seed=seed):
        prompt = doc["prompt"]
        if not isinstance(prompt, str):
            prompt = prompt[0]["content"]
        texts += [prompt, doc["response"]]
    texts += [f"{u} {a}" for u, a in CHAT_PAIRS] + [R1_ZERO_TEMPLATE] * 50
    texts += ["".join(WORDS_ZH.values())]
    texts += ["user assistant system\n"] * 200
    return texts


@functools.lru_cache(maxsize=4)
def _build_tokenizer_json(vocab_size: int, task: str = "arithmetic") -> str:
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(_tokenizer_training_text(task=task), trainer=trainer)
    return tok.to_str()


def build_tokenizer(vocab_size: int = 512, task: str = "arithmetic"):
    """A Qwen-style byte-level BPE tokenizer learned from the book's corpus of
    ``task`` (the arithmetic corpus, or the Countdown corpus of chapter 17).

    Like Qwen2's: byte-level (any text round-trips), every digit its own token, the
    special tokens ``<|endoftext|>`` (padding), ``<|im_start|>`` and ``<|im_end|>`` (end
    of turn, the EOS), and a ChatML chat template. Left padding, as generation wants.
    """
    from tokenizers import Tokenizer
    from transformers import PreTrainedTokenizerFast

    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} "
                         f"(256 bytes + special tokens), got {vocab_size}")
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(_build_tokenizer_json(vocab_size, task)),
        bos_token=None, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        unk_token=None, padding_side="left", clean_up_tokenization_spaces=False,
        model_max_length=1024,
    )
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def stop_token_ids(tokenizer) -> list[int]:
    """Token ids that end a completion: ``<|im_end|>`` and ``<|endoftext|>`` when
    present."""
    ids = []
    for token in ("<|im_end|>", "<|endoftext|>"):
        tid = tokenizer.convert_tokens_to_ids(token)
        if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
            ids.append(tid)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError(
            "the tokenizer has no EOS/<|im_end|>/<|endoftext|> token to stop on")
    return ids


def model_config(tokenizer, size: str = "tiny", **overrides):
    """A ``Qwen2Config`` for one of :data:`MODEL_SIZES`, sized to ``tokenizer``."""
    from transformers import Qwen2Config

    if size not in MODEL_SIZES:
        raise ValueError(
            f"unknown model size {size!r}; choose from {list(MODEL_SIZES)}")
    fields = dict(vocab_size=len(tokenizer), max_position_embeddings=1024,
                  rope_theta=10000.0, tie_word_embeddings=True, rms_norm_eps=1e-6,
                  bos_token_id=None, eos_token_id=stop_token_ids(tokenizer),
                  pad_token_id=tokenizer.pad_token_id, use_cache=True)
    fields.update(MODEL_SIZES[size])
    fields.update(overrides)
    return Qwen2Config(**fields)


def random_model(tokenizer, size: str = "micro", seed: int = 0, **overrides):
    """A randomly initialised ``Qwen2ForCausalLM`` (for tests and the shift chapter)."""
    from transformers import GenerationConfig, Qwen2ForCausalLM

    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(model_config(tokenizer, size, **overrides))
    model.generation_config = GenerationConfig(
        eos_token_id=stop_token_ids(tokenizer), pad_token_id=tokenizer.pad_token_id)
    return model.eval()


def count_parameters(model) -> int:
    """Number of distinct parameters (tied embeddings counted once)."""
    seen, total = set(), 0
    for p in model.parameters():
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel()
    return total


def load_model_and_tokenizer(name_or_path: str | Path, device: str = "cpu",
                             dtype: torch.dtype | None = None):
    """Load a causal LM and its tokenizer from a folder (offline) or a hub name.

    ``data/models/tiny-qwen2-base`` and ``Qwen/Qwen2.5-0.5B-Instruct`` go through the
    same code. The tokenizer is set to left padding (what batched generation needs) and
    gets a pad token if it has none.
    """
    import contextlib

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .hub import hub_access

    path = Path(name_or_path)
    looks_local = path.exists() or str(name_or_path).startswith((".", "/", "data"))
    if looks_local and not (path / "config.json").exists():
        raise FileNotFoundError(
            f"No model at {path}: expected a folder with config.json. The book's base "
            f"model is made by `python -m grpo_lib pretrain --size tiny` (see "
            f"data/README.md).")
    online = None
    try:  # a hub name where the hub is out of reach: the cache, or one error at once
        with contextlib.nullcontext(True) if looks_local else hub_access() as online:
            tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
            model = AutoModelForCausalLM.from_pretrained(str(name_or_path), dtype=dtype)
    except Exception as err:  # noqa: BLE001 -- hub, file and format errors alike
        if looks_local:  # e.g. a SafetensorError: a weights file cut short
            raise OSError(
                f"Could not load the model folder {path}: {type(err).__name__}: "
                f"{str(err).splitlines()[0] if str(err) else ''}. A file in it may be "
                f"damaged or incomplete; make it again (for the book's models, "
                f"data/README.md gives the commands).") from err
        where = ("the hub may be out of reach" if online else
                 "the hub is out of reach from here and the model is not in the cache")
        raise OSError(
            f"Could not load {name_or_path!r}: {err}\nIf this is a hub name, {where}; "
            f"use a local folder such as data/models/tiny-qwen2-base.") from err
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device).eval(), tokenizer
