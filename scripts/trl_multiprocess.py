"""Our YAML config trained by TRL's ``GRPOTrainer`` on several processes at once.

The same task, rewards and config as ``python -m grpo_lib trl-train``, launched by
``accelerate``: every process holds a copy of the model, generates and scores its share
of the step's completions, and the gradients are averaged over the processes (DDP).
Two processes on this machine's CPU (gloo), a few seconds at smoke size::

    OMP_NUM_THREADS=1 accelerate launch \\
        --config_file configs/accelerate/cpu_2proc.yaml scripts/trl_multiprocess.py \\
        --config configs/r1_zero_arithmetic.yaml --smoke --set output_dir=runs/trl_2proc

The same script runs as plain ``python`` (one process), and on N GPUs with the other
files in ``configs/accelerate/`` (DeepSpeed ZeRO-2/3, vLLM colocate; their headers
give the commands). ``--set`` changes our config (as ``python -m grpo_lib train``),
``--trl KEY=VALUE`` and ``--trl-config FILE`` set ``trl.GRPOConfig`` fields our config
does not map (``use_vllm``, ``bf16``, ...).

One of our steps stays one TRL generation batch of ``per_step_prompts x G``
completions over all processes and one optimizer step (see
:func:`multiprocess_trl_config`). Rank 0 writes ``multiprocess_summary.json`` into the
output folder: steps, world size, ``accelerator.num_processes``, the logged reward of
every step, and the completions each process scored.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python scripts/...` from anywhere
    sys.path.insert(0, str(ROOT))

from grpo_lib.trainer import GRPOConfig, load_config  # noqa: E402

SMOKE = ["per_step_prompts=2", "num_generations=4", "max_completion_length=16",
         "micro_batch_size=4", "max_steps=2", "save_every=0", "save_final=false",
         "progress_bar=false"]
"""``--smoke``: 2 prompts x 4 completions of at most 16 tokens, 2 steps, no
checkpoint (applied before ``--set``, which can change any of them)."""

SUMMARY = "multiprocess_summary.json"


def launched_processes() -> int:
    """How many processes the launcher started (1 under plain ``python``): torchrun's
    ``WORLD_SIZE``, or MPI's size under ``mpirun``."""
    from accelerate.utils import get_int_from_env

    return get_int_from_env(["WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
                             "MV2_COMM_WORLD_SIZE"], 1)


def multiprocess_trl_config(config: GRPOConfig, num_processes: int, **overrides):
    """``grpo_lib.trl_bridge.to_trl_config(config, num_processes=N)``: one of our
    steps stays one generation batch and one optimizer step over all N processes
    (``per_device_train_batch_size = min(micro_batch_size, B / N)``,
    ``gradient_accumulation_steps = B / (N m)``); checks that TRL sees N processes."""
    from grpo_lib.trl_bridge import to_trl_config

    trl_config = to_trl_config(config, num_processes=num_processes, **overrides)
    if trl_config.world_size != num_processes:
        raise RuntimeError(
            f"TRL sees {trl_config.world_size} process(es), not {num_processes}. "
            f"Launch with `accelerate launch --config_file "
            f"configs/accelerate/cpu_2proc.yaml ...` (torchrun); accelerate's "
            f"MULTI_CPU launcher (or `--cpu`) starts one process unless it runs "
            f"under mpirun.")
    assert trl_config.steps_per_generation == trl_config.gradient_accumulation_steps
    return trl_config


class GroupCount:
    """A TRL reward function that also counts, on its process, the completions it
    scores and whether they come as whole groups (G rows in a row share a prompt)."""

    def __init__(self, fn, num_generations: int):
        self.fn, self.G, self.__name__ = fn, num_generations, fn.__name__
        self.rows, self.whole_groups = 0, True

    def __call__(self, prompts, completions, **kwargs):
        G = self.G
        self.rows += len(completions)
        self.whole_groups &= len(prompts) % G == 0 and all(
            p == prompts[i - i % G] for i, p in enumerate(prompts))
        return self.fn(prompts=prompts, completions=completions, **kwargs)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, help="our YAML config")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="change a field of our config (after --smoke)")
    parser.add_argument("--smoke", action="store_true",
                        help="a few seconds: " + " ".join(SMOKE))
    parser.add_argument("--trl-config", metavar="FILE",
                        help="YAML of extra trl.GRPOConfig fields "
                             "(configs/accelerate/vllm_colocate.yaml)")
    parser.add_argument("--trl", action="append", default=[], metavar="KEY=VALUE",
                        help="an extra trl.GRPOConfig field (after --trl-config)")
    return parser.parse_args(argv)


def main(argv=None) -> dict | None:
    """Train; return the summary on rank 0 (``None`` on the other ranks)."""
    from grpo_lib.yaml_config import read_yaml_values

    args = parse_args(argv)
    config = load_config(args.config, [*(SMOKE if args.smoke else []), *args.set])
    extra = read_yaml_values(args.trl_config, args.trl, GRPOConfig)
    # TRL's config first: it sets up the processes (and ZeRO-3's weight partitioning
    # must exist before the model loads)
    trl_config = multiprocess_trl_config(config, launched_processes(), **extra)

    import trl
    from accelerate.utils import gather_object
    from transformers.utils import logging as hf_logging

    from grpo_lib.models import load_model_and_tokenizer
    from grpo_lib.trainer import MODEL_DTYPES
    from grpo_lib.trl_bridge import trl_reward_funcs
    from grpo_lib.trl_run import trl_dataset

    hf_logging.set_verbosity_error()
    model, tokenizer = load_model_and_tokenizer(
        config.model_name_or_path, device="cpu", dtype=MODEL_DTYPES[config.model_dtype])
    G = config.num_generations
    rewards = [GroupCount(fn, G) for fn in trl_reward_funcs(config)]
    trainer = trl.GRPOTrainer(model=model, processing_class=tokenizer,
                              reward_funcs=rewards, args=trl_config,
                              train_dataset=trl_dataset(config.task, "train",
                                                        config.prompt_format))
    t0 = time.perf_counter()
    trainer.train()
    accelerator = trainer.accelerator
    scored = gather_object([dict(rank=accelerator.process_index,
                                 completions=rewards[0].rows,
                                 whole_groups=rewards[0].whole_groups)])
    if not accelerator.is_main_process:
        return None
    logged = [e for e in trainer.state.log_history if "reward" in e]
    summary = dict(
        global_steps=trainer.state.global_step,
        steps=trainer.state.global_step // config.num_iterations,
        world_size=trl_config.world_size,
        num_processes=accelerator.num_processes,
        distributed_type=str(accelerator.distributed_type).split(".")[-1],
        backend=accelerator.state.backend,
        generation_batch_size=trl_config.generation_batch_size,
        per_device_train_batch_size=trl_config.per_device_train_batch_size,
        gradient_accumulation_steps=trl_config.gradient_accumulation_steps,
        steps_per_generation=trl_config.steps_per_generation,
        reward_step=[e["step"] for e in logged],
        reward=[e["reward"] for e in logged],
        scored_per_process=scored,
        seconds=round(time.perf_counter() - t0, 1),
        trl=trl.__version__)
    out = Path(trl_config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SUMMARY).write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{summary['steps']} steps on {summary['num_processes']} process(es) "
          f"({summary['distributed_type']}, {summary['backend']}), reward "
          f"{summary['reward']}; wrote {out / SUMMARY}")
    return summary


if __name__ == "__main__":
    main()
    # The run is over and rank 0 has written its summary. Leave without the
    # interpreter's teardown: there a rank's open gloo process group can abort it
    # ("terminate called without an active exception"), failing a finished run.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
