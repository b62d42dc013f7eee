"""Scale-out: TRL's GRPOTrainer on several processes (scripts/trl_multiprocess.py) and
the config files of configs/accelerate/, each read by the installed packages' own code.

Checked here, without GPUs: accelerate's ``ClusterConfig`` (keys, enum values), what
``accelerate launch`` makes of each file (its own ``_validate_launch_command``: which
launcher, how many processes), the environment its DeepSpeed launcher hands the
processes and the ``DeepSpeedPlugin`` (the DeepSpeed config dict) accelerate builds from
it; ``trl.GRPOConfig`` for the vLLM fields; a real 2-process run on the CPU (slow).

Not checked (DeepSpeed and vLLM are not installed, no GPU): DeepSpeed's own config
schema and engine, transformers' filling of the "auto" values from the TRL config
(``HfTrainerDeepSpeedConfig`` needs deepspeed), bf16, vLLM itself.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

trl = pytest.importorskip("trl")

from accelerate.commands.config.config_args import (  # noqa: E402
    ClusterConfig,
    load_config_from_file,
)
from accelerate.commands.launch import (  # noqa: E402
    _validate_launch_command,
    launch_command_parser,
)
from accelerate.utils import DeepSpeedPlugin, DistributedType  # noqa: E402
from accelerate.utils.launch import (  # noqa: E402
    prepare_deepspeed_cmd_env,
    prepare_multi_gpu_env,
    prepare_simple_launcher_cmd_env,
)

from grpo_lib.trainer import load_config  # noqa: E402
from grpo_lib.trl_bridge import to_trl_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ROOT / "configs" / "accelerate"
SCRIPT = ROOT / "scripts" / "trl_multiprocess.py"
BOOK_CONFIG = ROOT / "configs" / "r1_zero_arithmetic.yaml"
ACCELERATE_FILES = ["cpu_2proc.yaml", "deepspeed_zero2.yaml", "deepspeed_zero3.yaml"]


def script_module():
    spec = importlib.util.spec_from_file_location("trl_multiprocess", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def launch_args(path: Path):
    """What ``accelerate launch --config_file PATH scripts/trl_multiprocess.py`` makes
    of the file (accelerate's own parser and checks): ``(args, file, mp_from_file)``."""
    args = launch_command_parser().parse_args(["--config_file", str(path), str(SCRIPT)])
    return _validate_launch_command(args)


def header(path: Path) -> str:
    return "".join(line for line in path.read_text().splitlines(keepends=True)
                   if line.startswith("#"))


@pytest.mark.parametrize("name", [*ACCELERATE_FILES, "vllm_colocate.yaml"])
def test_each_file_says_what_it_is_for_and_the_command(name):
    text = header(CONFIGS / name)
    assert "scripts/trl_multiprocess.py" in text
    assert f"configs/accelerate/{name}" in text
    assert "accelerate launch" in text


@pytest.mark.parametrize("name", ACCELERATE_FILES)
def test_accelerate_reads_the_file(name):
    cfg = load_config_from_file(str(CONFIGS / name))  # what `accelerate launch` calls
    assert isinstance(cfg, ClusterConfig)  # unknown keys or enum values would raise
    assert cfg.num_machines == 1 and cfg.main_process_port == 0  # 0: a free port


def test_cpu_2proc_starts_two_processes_with_torchrun():
    cfg = load_config_from_file(str(CONFIGS / "cpu_2proc.yaml"))
    assert cfg.distributed_type == DistributedType.MULTI_GPU
    assert cfg.num_processes == 2 and cfg.mixed_precision == "no"
    args, _, _ = launch_args(CONFIGS / "cpu_2proc.yaml")
    # launch_command's choice: multi_gpu and not cpu -> multi_gpu_launcher (torchrun)
    assert args.multi_gpu and not args.cpu and not args.use_deepspeed
    env = prepare_multi_gpu_env(args)
    assert args.nproc_per_node == "2"
    assert args.main_process_port > 0  # accelerate picked a free port for port 0
    assert env["ACCELERATE_MIXED_PRECISION"] == "no"


def test_a_multi_cpu_file_would_start_one_process(tmp_path):
    """Why cpu_2proc.yaml is not MULTI_CPU: without mpirun, accelerate's launcher for
    it runs the script once."""
    path = tmp_path / "multi_cpu.yaml"
    path.write_text("distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\n")
    args, _, _ = launch_args(path)
    assert not args.multi_gpu and not args.use_deepspeed  # -> simple_launcher
    cmd, _ = prepare_simple_launcher_cmd_env(args)
    assert cmd == [sys.executable, str(SCRIPT)]  # one python, no mpirun


@pytest.mark.parametrize("name, stage", [("deepspeed_zero2.yaml", 2),
                                         ("deepspeed_zero3.yaml", 3)])
def test_deepspeed_file_builds_the_plugin_accelerate_would_use(name, stage,
                                                               monkeypatch):
    cfg = load_config_from_file(str(CONFIGS / name))
    assert cfg.distributed_type == DistributedType.DEEPSPEED
    assert cfg.deepspeed_config["zero_stage"] == stage and cfg.num_processes == 8
    args, file_cfg, mp_from_file = launch_args(CONFIGS / name)
    assert args.use_deepspeed and args.num_processes == 8
    known = {a.dest for a in launch_command_parser()._actions}
    assert set(cfg.deepspeed_config) <= known  # launch would ignore an unknown key
    # as launch_command does before deepspeed_launcher (which needs deepspeed)
    fields = [*file_cfg.deepspeed_config, *(["mixed_precision"] * mp_from_file)]
    args.deepspeed_fields_from_accelerate_config = ",".join(fields)
    _, env = prepare_deepspeed_cmd_env(args)
    for key, value in env.items():
        if key.startswith("ACCELERATE_"):
            monkeypatch.setenv(key, value)
    plugin = DeepSpeedPlugin()  # what each process builds from that environment
    plugin.set_mixed_precision(env["ACCELERATE_MIXED_PRECISION"])
    ds = plugin.deepspeed_config
    assert ds["zero_optimization"]["stage"] == stage
    assert ds["zero_optimization"]["offload_optimizer"]["device"] == "none"
    assert ds["zero_optimization"]["offload_param"]["device"] == "none"
    assert ds["bf16"] == {"enabled": True}  # hence --trl bf16=true in the command
    for key in ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
                "gradient_clipping"):
        assert ds[key] == "auto", key  # filled from the TRL config by transformers
    assert plugin.hf_ds_config.is_zero3() == (stage == 3)
    assert plugin.zero3_init_flag == (stage == 3)
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] == (
        stage == 3)
    assert "--trl bf16=true" in header(CONFIGS / name)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16])
def test_one_of_our_steps_is_one_generation_batch_on_n_processes(n, monkeypatch):
    """TRL's batch arithmetic for the book's config (16 prompts x 8) on n processes;
    TRL's world size is patched (the real one needs n launched processes)."""
    monkeypatch.setattr(trl.GRPOConfig, "world_size", property(lambda self: n))
    config = load_config(BOOK_CONFIG)
    c = script_module().multiprocess_trl_config(config, n)
    assert c.generation_batch_size == 128
    assert c.per_device_train_batch_size * n * c.gradient_accumulation_steps == 128
    assert c.steps_per_generation == c.gradient_accumulation_steps  # 1 update/batch
    per_process = c.per_device_train_batch_size * c.steps_per_generation
    assert per_process * n == 128 and per_process % config.num_generations == 0
    assert c.max_steps == config.max_steps


def test_multiprocess_config_errors_say_what_to_do():
    tm = script_module()
    config = load_config(BOOK_CONFIG)
    with pytest.raises(ValueError, match="per_step_prompts=18"):
        tm.multiprocess_trl_config(config, 3)
    with pytest.raises(RuntimeError, match="cpu_2proc.yaml"):
        tm.multiprocess_trl_config(config, 2)  # plain pytest: one process


def test_vllm_colocate_fields_are_accepted_by_trl():
    fields = yaml.safe_load((CONFIGS / "vllm_colocate.yaml").read_text())
    assert set(fields) <= {f.name for f in dataclasses.fields(trl.GRPOConfig)}
    assert fields["use_vllm"] is True and fields["vllm_mode"] == "colocate"
    vllm_before = "vllm" in sys.modules
    config = load_config(BOOK_CONFIG)
    c = to_trl_config(config, **fields)
    assert c.use_cpu  # constructible here: no GPU, no vllm import
    for name, value in fields.items():
        assert getattr(c, name) == value, name
    # the header's suggestion: correct for vLLM's sampling (our config maps it)
    assert "--set sampling_correction=true --set rollout_engine=fast" in header(
        CONFIGS / "vllm_colocate.yaml")
    corrected = dataclasses.replace(config, sampling_correction=True,
                                    rollout_engine="fast")
    c = to_trl_config(corrected, **fields)
    assert c.vllm_importance_sampling_correction
    assert ("vllm" in sys.modules) == vllm_before
    # TRL (VLLMGeneration) needs the tensor-parallel size to divide the processes
    for name in ACCELERATE_FILES[1:]:
        n = load_config_from_file(str(CONFIGS / name)).num_processes
        assert n % fields["vllm_tensor_parallel_size"] == 0


@pytest.mark.slow
def test_two_process_accelerate_run(tmp_path):
    """``accelerate launch`` of TRL's GRPOTrainer on 2 CPU processes (gloo), 2 steps."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACCELERATE_")
           and k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR",
                         "MASTER_PORT")}
    env["OMP_NUM_THREADS"] = "1"
    cmd = [sys.executable, "-m", "accelerate.commands.launch",
           "--config_file", str(CONFIGS / "cpu_2proc.yaml"), str(SCRIPT),
           "--config", str(BOOK_CONFIG), "--smoke", "--set", f"output_dir={tmp_path}"]
    # its own process group, so that a hung run is stopped with both ranks, not
    # only the launcher (orphaned ranks would slow every later test)
    run = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = run.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        log, _ = run.communicate()
        pytest.fail("the 2-process run did not end within 300 s:\n" + log[-4000:])
    assert run.returncode == 0, log[-4000:]
    s = json.loads((tmp_path / "multiprocess_summary.json").read_text())
    assert s["num_processes"] == s["world_size"] == 2
    assert (s["distributed_type"], s["backend"]) == ("MULTI_CPU", "gloo")
    assert s["steps"] == s["global_steps"] == 2 and s["reward_step"] == [1, 2]
    assert len(s["reward"]) == 2 and all(math.isfinite(r) for r in s["reward"])
    assert s["generation_batch_size"] == 8  # 2 prompts x 4, over both processes
    assert s["gradient_accumulation_steps"] == s["steps_per_generation"] == 1
    # each process scored its own half, 2 steps x 4 completions, as whole groups
    assert s["scored_per_process"] == [
        {"rank": r, "completions": 8, "whole_groups": True} for r in (0, 1)]
