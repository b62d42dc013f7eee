"""Command line: ``python -m grpo_lib {make-data,make-sft-data,pretrain,card,eval,train,
sft,distill,train-async,trl-train,export,rejection-sample,plot} ...``.

Each subcommand is a thin wrapper around a library function, so everything the CLI does
can also be done from a notebook or a script.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

EVAL_DTYPES = ("auto", "float32", "bfloat16")  # eval --dtype: trainer.MODEL_DTYPES


@contextlib.contextmanager
def _setup_errors(command: str):
    """Report a setup mistake (a missing file, a bad config value, a model folder that
    is not there) as one line and exit with status 2; errors during training keep their
    traceback."""
    try:
        yield
    except (ValueError, TypeError, OSError) as err:
        print(f"python -m grpo_lib {command}: error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


def at_least(low: float, kind=int, strict: bool = False):
    """An argparse type: a ``kind`` number >= ``low`` (> ``low`` if ``strict``), else
    argparse's one-line error. Without it a count of 0 would be taken for the default,
    and a negative one would write an empty data split."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {'an integer' if kind is int else 'a number'}, got "
                f"{text!r}") from None
        if not (value > low if strict else value >= low):  # also refuses nan
            raise argparse.ArgumentTypeError(
                f"must be {'>' if strict else '>='} {low}, got {text}")
        return value

    return parse


def _make_data(args: argparse.Namespace) -> None:
    """``--stage arithmetic`` (the splits), ``cold-start`` (annotated conversations
    drawn from the train split), ``skills`` (the non-reasoning skills) or
    ``countdown`` (GRPO-Zero's task)."""
    from .tasks import arithmetic, cold_start, countdown, skills

    # sizes left out keep the writer's own defaults
    sizes = {name: value for name, value in
             (("n_train", args.n_train), ("n_test", args.n_test)) if value is not None}
    with _setup_errors("make-data"):
        if args.stage == "arithmetic":
            arithmetic.write_splits(args.out or arithmetic.DATA_DIR, seed=args.seed,
                                    **sizes)
        elif args.stage == "cold-start":
            n = {"n": sizes["n_train"]} if "n_train" in sizes else {}
            cold_start.write_cold_start(args.out or cold_start.COLD_START_DIR,
                                        seed=args.seed, **n)
        elif args.stage == "countdown":
            countdown.write_splits(args.out or countdown.DATA_DIR, seed=args.seed,
                                   **sizes)
        else:
            skills.write_skills(args.out or skills.SKILLS_DIR, seed=args.seed, **sizes)


def _export(args: argparse.Namespace) -> None:
    from .model_cards import export_model

    command = args.command_line or "(not given: pass --command-line)"
    with _setup_errors("export"):
        export_model(args.run, args.out, command, eval_n=args.eval_n,
                     max_new_tokens=args.max_new_tokens)


def _rejection_sample(args: argparse.Namespace) -> None:
    from .rejection import rejection_sample_from_args

    with _setup_errors("rejection-sample"):
        rejection_sample_from_args(args)


def _train_reward_model(args: argparse.Namespace) -> None:
    from .reward_model import train_reward_model_from_args

    with _setup_errors("train-reward-model"):
        train_reward_model_from_args(args)


def _make_sft_data(args: argparse.Namespace) -> None:
    from .sft import arithmetic_sft_rows
    from .tasks import write_jsonl

    with _setup_errors("make-sft-data"):
        rows = arithmetic_sft_rows(args.n, split=args.split)
        print(f"wrote {write_jsonl(rows, args.out)} ({len(rows)} conversations)")


def _pretrain(args: argparse.Namespace) -> None:
    from .pretrain import pretrainer_from_args

    with _setup_errors("pretrain"):
        trainer = pretrainer_from_args(args)
    try:
        trainer.train_and_save(eval_n=args.eval_n)
    except KeyboardInterrupt:  # the trainer saved a checkpoint and said how to resume
        raise SystemExit(130) from None


def _card(args: argparse.Namespace) -> None:
    from .pretrain import write_model_card

    with _setup_errors("card"):  # a folder that pretraining did not write, mostly
        write_model_card(args.path, eval_n=args.eval_n, seed=args.seed)


def _eval(args: argparse.Namespace) -> None:
    from .evaluation import evaluate
    from .models import load_model_and_tokenizer
    from .profiles import profile
    from .tasks import load_task_split
    from .trainer import MODEL_DTYPES

    P = profile()
    with _setup_errors("eval"):
        model, tokenizer = load_model_and_tokenizer(args.model, device=P.device,
                                                    dtype=MODEL_DTYPES[args.dtype])
        dataset = load_task_split(args.task, args.split)
        for out in filter(None, (args.csv, args.samples_out)):  # before, not after
            if not Path(out).resolve().parent.is_dir():
                raise FileNotFoundError(f"no folder for the output {out}; create it")
    table = evaluate(model, tokenizer, dataset, n=args.n, batch_size=args.batch_size,
                     max_new_tokens=args.max_new_tokens, num_samples=args.samples,
                     temperature=args.temperature, prompt_format=args.prompt_format,
                     seed=args.seed, return_samples=bool(args.samples_out))
    if args.samples_out:
        table, samples = table
    n = min(args.n, len(dataset))
    print(f"model: {args.model} ({model.dtype}) | task: {args.task}/{args.split} | "
          f"n={n} | {P}")
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    if args.csv:
        table.to_csv(args.csv)
        print(f"wrote {args.csv}")
    if args.samples_out:  # one row per answer; a name ending .gz is compressed
        samples.to_json(args.samples_out, orient="records", lines=True)
        print(f"wrote {args.samples_out} ({len(samples)} answers)")


def _run_from_yaml(command: str, module, args) -> None:
    """Build ``module``'s trainer from ``--config``/``--set`` (setup mistakes: one
    line, exit 2) and train it (Ctrl-C: the trainer saves a checkpoint; exit 130)."""
    with _setup_errors(command):
        trainer = module.trainer_from_yaml(args.config, overrides=args.set or [])
    try:
        module.run_training(trainer)
    except KeyboardInterrupt:  # the trainer saved a checkpoint and said how to resume
        raise SystemExit(130) from None


def _train(args: argparse.Namespace) -> None:
    from . import trainer

    _run_from_yaml("train", trainer, args)


def _sft(args: argparse.Namespace) -> None:
    from . import sft

    _run_from_yaml("sft", sft, args)


def _distill(args: argparse.Namespace) -> None:
    from . import distill

    _run_from_yaml("distill", distill, args)


def _train_async(args: argparse.Namespace) -> None:
    """GRPO with a rollout worker process and bounded staleness (grpo_lib.async_rl)."""
    from . import async_rl, trainer
    from .yaml_config import read_yaml_values

    with _setup_errors("train-async"):
        extra = read_yaml_values(None, args.async_set or [], async_rl.AsyncConfig)
        run = async_rl.async_trainer_from_yaml(args.config, args.set or [], extra)
    try:
        trainer.run_training(run)
    except KeyboardInterrupt:  # the trainer saved a checkpoint and said how to resume
        raise SystemExit(130) from None


def _trl_train(args: argparse.Namespace) -> None:
    """Our YAML config trained by TRL's GRPOTrainer (grpo_lib.trl_run)."""
    from .trl_run import load_trl_run

    with _setup_errors("trl-train"):
        run = load_trl_run(args.config, args.set or [], args.trl or [])
    try:
        run()
    except KeyboardInterrupt:  # a checkpoint was saved and the resume line printed
        raise SystemExit(130) from None


def _plot(args: argparse.Namespace) -> None:
    from .plots import plot_run

    with _setup_errors("plot"):
        path = plot_run(args.run_dir, save=args.out)
    print(f"wrote {path}")


def build_parser() -> argparse.ArgumentParser:
    from .countdown_corpus import COUNTDOWN_MIXES
    parser = argparse.ArgumentParser(prog="python -m grpo_lib",
                                     description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "make-data", help="write a data set: the arithmetic splits (default), the "
                          "cold-start conversations, the non-reasoning skills or "
                          "the Countdown splits")
    p.add_argument("--stage", default="arithmetic",
                   choices=["arithmetic", "cold-start", "skills", "countdown"])
    p.add_argument("--out", default=None,
                   help="folder (default data/arithmetic, data/cold_start, "
                        "data/skills or data/countdown)")
    p.add_argument("--n-train", type=at_least(1), default=None,
                   help="training rows (defaults: 20000 problems; 4000 conversations; "
                        "500 per skill)")
    p.add_argument("--n-test", type=at_least(1), default=None,
                   help="held-out rows (defaults: 1000 problems; 100 per skill)")
    p.add_argument("--seed", type=at_least(0), default=0)
    p.set_defaults(func=_make_data)

    p = sub.add_parser("make-sft-data",
                       help="write arithmetic conversations (R1 format) for SFT")
    p.add_argument("--out", default="data/sft/arithmetic_r1_chat.jsonl")
    p.add_argument("--split", default="train", choices=["train", "test"])
    p.add_argument("--n", type=at_least(1), default=200, help="the first N problems")
    p.set_defaults(func=_make_sft_data)

    p = sub.add_parser("pretrain",
                       help="pretrain a tiny Qwen2 base model on the designed corpus")
    p.add_argument("--size", default="tiny", choices=["micro", "mini", "tiny", "small"])
    p.add_argument("--task", default="arithmetic", choices=["arithmetic", "countdown"],
                   help="the designed corpus: arithmetic, or Countdown (chapter 17)")
    p.add_argument("--countdown-mix", default="tree", choices=list(COUNTDOWN_MIXES),
                   help="Countdown's attempts, a corpus of grpo_lib.countdown_corpus."
                        "COUNTDOWN_MIXES (chapter 17 trains a base on each)")
    p.add_argument("--init-from", default=None, metavar="MODEL",
                   help="continue pretraining this model (with its tokenizer) instead "
                        "of starting from random weights")
    p.add_argument("--out", default=None,
                   help="checkpoint folder (default data/models/<size>-qwen2-base, "
                        "or <size>-qwen2-countdown-base)")
    p.add_argument("--steps", type=at_least(1), default=None,
                   help="optimizer steps (default: the size's)")
    p.add_argument("--batch-size", type=at_least(1), default=None)
    p.add_argument("--lr", type=at_least(0.0, float, strict=True), default=None)
    p.add_argument("--seed", type=at_least(0), default=0)
    p.add_argument("--device", default=None,
                   help="cpu or cuda (default: the profile's)")
    p.add_argument("--eval-n", type=at_least(0), default=500,
                   help="held-out problems for the model card")
    p.add_argument("--save-dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--save-every", type=at_least(0), default=0,
                   help="checkpoint every N steps in <out>.tmp (0: only on Ctrl-C)")
    p.add_argument("--resume-from-checkpoint", default=None, metavar="PATH|latest",
                   help="go on from a checkpoint of an interrupted run")
    p.add_argument("--overwrite-output-dir", action="store_true",
                   help="delete an interrupted run's checkpoints and start afresh")
    p.set_defaults(func=_pretrain)

    p = sub.add_parser(
        "card", help="evaluate a pretrained checkpoint and rewrite its model card")
    p.add_argument("path")
    p.add_argument("--eval-n", type=at_least(0), default=500)
    p.add_argument("--seed", type=at_least(0), default=0)
    p.set_defaults(func=_card)

    p = sub.add_parser("eval", help="evaluate a checkpoint with the harness")
    p.add_argument("--model", required=True, help="checkpoint folder or hub name")
    p.add_argument("--task", default="arithmetic")
    p.add_argument("--split", default="test")
    p.add_argument("--n", type=at_least(1), default=500)
    p.add_argument("--batch-size", type=at_least(1), default=64)
    p.add_argument("--max-new-tokens", type=at_least(1), default=96)
    p.add_argument("--samples", type=at_least(0), default=0,
                   help="also sample K completions per prompt")
    p.add_argument("--temperature", type=at_least(0.0, float), default=1.0)
    p.add_argument("--prompt-format", default="chat", choices=["chat", "r1_zero"])
    p.add_argument("--seed", type=at_least(0), default=0)
    p.add_argument("--dtype", default="auto", choices=EVAL_DTYPES,
                   help="weights' dtype, as the trainer's model_dtype: auto (the "
                        "dtype the model's config.json names) or float32, as the "
                        "trainer loads them by default")
    p.add_argument("--csv", default=None)
    p.add_argument("--samples-out", default=None, metavar="PATH.jsonl[.gz]",
                   help="also write every answer with its scores, one JSON row each")
    p.set_defaults(func=_eval)

    p = sub.add_parser("train", help="GRPO training from a YAML config")
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field")
    p.set_defaults(func=_train)

    p = sub.add_parser("train-async", help="GRPO with a rollout worker process and "
                                           "bounded staleness (chapter 20)")
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field")
    p.add_argument("--async", action="append", metavar="KEY=VALUE", dest="async_set",
                   help="an AsyncConfig field: max_staleness, objective, "
                        "behaviour_weight_cap, behaviour_weight_mode, "
                        "worker_threads, wait_timeout")
    p.set_defaults(func=_train_async)

    p = sub.add_parser("trl-train", help="the same YAML config trained by TRL's "
                                         "GRPOTrainer (chapter 18)")
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a field of our config (resume_from_checkpoint="
                        "latest continues a run)")
    p.add_argument("--trl", action="append", metavar="KEY=VALUE",
                   help="set a trl.GRPOConfig field our config does not map")
    p.set_defaults(func=_trl_train)

    p = sub.add_parser("sft", help="supervised fine-tuning from a YAML config")
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field")
    p.set_defaults(func=_sft)

    p = sub.add_parser("distill", help="distil a teacher into a student: SFT on its "
                                       "answers plus its token distributions (ch. 14)")
    p.add_argument("--config", required=True)
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config field")
    p.set_defaults(func=_distill)

    p = sub.add_parser(
        "export", help="copy a run's last checkpoint (model files only) to a model "
                       "folder, evaluate it and write its model card")
    p.add_argument("--run", required=True, help="the run's output_dir")
    p.add_argument("--out", required=True,
                   help="e.g. data/models/tiny-qwen2-cold-start")
    p.add_argument("--command-line", default=None,
                   help="the command that made the run, for the card")
    p.add_argument("--eval-n", type=at_least(0), default=500)
    p.add_argument("--max-new-tokens", type=at_least(1), default=128)
    p.set_defaults(func=_export)

    from .rejection import add_rejection_parser

    add_rejection_parser(sub).set_defaults(func=_rejection_sample)

    from .reward_model import add_reward_model_parser

    add_reward_model_parser(sub).set_defaults(func=_train_reward_model)

    p = sub.add_parser("plot", help="plot a run directory's metrics.csv")
    p.add_argument("run_dir")
    p.add_argument("--out", default=None)
    p.set_defaults(func=_plot)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    try:  # transformers' per-load "Loading weights" bar is noise in a CLI's output
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    args.func(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
