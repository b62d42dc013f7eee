"""The book's helper scripts (scripts/run_notebook.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nbformat

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _script(name: str):
    """``scripts/<name>.py`` imported as a module (the scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run_notebook_module():
    return _script("run_notebook")


def _nb(cells):
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    return nb


def test_keep_cell_ids_reuses_ids_of_unchanged_cells(tmp_path):
    keep_cell_ids = _run_notebook_module().keep_cell_ids
    old = _nb([nbformat.v4.new_markdown_cell("# Title"),
               nbformat.v4.new_code_cell("x = 1"),
               nbformat.v4.new_code_cell("x = 1"),
               nbformat.v4.new_code_cell("print(x)")])
    for cell, cid in zip(old.cells, ["aaaa0001", "aaaa0002", "aaaa0003", "aaaa0004"]):
        cell.id = cid
    path = tmp_path / "old.ipynb"
    nbformat.write(old, path)

    # the new source: one cell edited, one inserted, one fresh id equal to an old one
    new = _nb([nbformat.v4.new_markdown_cell("# Title"),
               nbformat.v4.new_code_cell("x = 1"),
               nbformat.v4.new_code_cell("y = 2"),
               nbformat.v4.new_code_cell("x = 1"),
               nbformat.v4.new_code_cell("print(x, y)")])
    new.cells[2].id = "aaaa0001"  # collides with the id the title will take back
    kept = keep_cell_ids(new, path)

    ids = [c.id for c in new.cells]
    assert kept == 3
    assert ids[0] == "aaaa0001" and ids[1] == "aaaa0002" and ids[3] == "aaaa0003"
    assert len(set(ids)) == len(ids)  # the colliding fresh id was replaced
    nbformat.validate(new)


def test_keep_cell_ids_without_a_previous_notebook(tmp_path):
    keep_cell_ids = _run_notebook_module().keep_cell_ids
    new = _nb([nbformat.v4.new_code_cell("x = 1")])
    before = new.cells[0].id
    assert keep_cell_ids(new, tmp_path / "missing.ipynb") == 0
    assert new.cells[0].id == before


ROOT = SCRIPTS.parent


def test_toc_and_chapter_map_are_up_to_date():
    assert _script("make_toc").main(["--check"]) == 0, "run: python scripts/make_toc.py"


def test_the_book_builds_with_warnings_as_errors(tmp_path):
    """The build that scripts/build_book.sh runs, into a temporary folder: a broken
    {ref}, {doc} or {cite}, or any other Sphinx warning, fails it."""
    import shutil
    import subprocess
    import sys

    jupyter_book = shutil.which("jupyter-book", path=str(Path(sys.executable).parent))
    assert jupyter_book, "jupyter-book is missing: bash scripts/setup_env.sh book,test"
    done = subprocess.run(
        [jupyter_book, "build", str(ROOT), "--config", str(ROOT / "_config.yml"),
         "--toc", str(ROOT / "_toc.yml"), "--path-output", str(tmp_path), "--all",
         "-W", "--keep-going"],
        capture_output=True, text=True, cwd=ROOT, timeout=900)
    log = done.stdout + done.stderr
    warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0 and not warnings, "\n".join(warnings[:20]) or log[-3000:]
    assert (tmp_path / "_build" / "html" / "index.html").exists()


def _ablation_module():
    return _script("fast_path_ablation")


def test_fast_path_ablation_swaps_exactly_one_piece(monkeypatch):
    import torch

    import grpo_lib.fast_decode as fast_decode
    import grpo_lib.sampling as sampling

    ablation = _ablation_module()
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0))
    # each replacement draws what the piece it stands for draws, from the same stream
    a = ablation.inverse_cdf_next_token(logits, 0.8, 0.9, True,
                                        torch.Generator().manual_seed(1))
    b = fast_decode.sample_inverse_cdf(logits, 0.8, 0.9, torch.Generator().manual_seed(1))
    assert torch.equal(a, b)
    assert torch.equal(ablation.inverse_cdf_next_token(logits, do_sample=False),
                       logits.argmax(-1))

    seen = {}
    monkeypatch.setattr(ablation, "train_from_yaml",
                        lambda path, overrides: seen.update(overrides=overrides))
    originals = sampling.next_token, fast_decode.sample_inverse_cdf
    expected = {"sampler": ["rollout_engine=transformers"],
                "numerics": ["rollout_engine=fast", "rollout_sampler=multinomial"]}
    for arm, engine in expected.items():
        monkeypatch.setattr(sampling, "next_token", originals[0])
        monkeypatch.setattr(fast_decode, "sample_inverse_cdf", originals[1])
        ablation.main([arm, "--set", "seed=3"])
        assert seen["overrides"] == engine + ["share_group_prompt=false", "seed=3"]
        swapped = (sampling.next_token is ablation.inverse_cdf_next_token,
                   fast_decode.sample_inverse_cdf is not originals[1])
        assert swapped == ((True, False) if arm == "sampler" else (False, False))
    # exponential_u: the whole fast path, its uniforms made from exponential_
    monkeypatch.setattr(fast_decode, "sample_inverse_cdf", originals[1])
    ablation.main(["exponential_u", "--set", "seed=3"])
    assert seen["overrides"] == ["rollout_engine=fast", "rollout_sampler=inverse_cdf",
                                 "share_group_prompt=true", "seed=3"]
    assert fast_decode.sample_inverse_cdf is ablation.exponential_u_sampler
    e = torch.empty(64).exponential_(1.0, generator=torch.Generator().manual_seed(1))
    u = -torch.expm1(-e)  # the uniforms the ablation's sampler makes from them
    assert torch.equal(ablation.exponential_u_sampler(
        logits, 0.8, 0.9, torch.Generator().manual_seed(1)),
        originals[1](logits, 0.8, 0.9, u=u))
    # float64: the same inverse CDF in float64
    monkeypatch.setattr(fast_decode, "sample_inverse_cdf", originals[1])
    ablation.main(["float64", "--set", "seed=3"])
    assert seen["overrides"][:3] == [
        "rollout_engine=fast", "rollout_sampler=inverse_cdf", "share_group_prompt=true"]
    assert fast_decode.sample_inverse_cdf is ablation.float64_sampler
    u64 = torch.rand(64, dtype=torch.float64,
                     generator=torch.Generator().manual_seed(2))
    cdf = sampling.top_p_filter(logits.double() / 0.8, 0.9).softmax(-1).cumsum(-1)
    assert torch.equal(ablation.float64_sampler(
        logits, 0.8, 0.9, torch.Generator().manual_seed(2)),
        fast_decode.inverse_cdf_token(cdf, u64))


def test_countdown_reach_table_is_the_mean_unbiased_pass_at_k():
    import pandas as pd
    import pytest

    reach_table = _script("countdown_reach").reach_table
    counts = pd.DataFrame({"size": [3, 3, 4, 4], "n": [4, 4, 4, 4], "c": [4, 1, 0, 2]})
    reach = reach_table(counts)
    assert list(reach.index) == [1, 2, 3, 4]
    # k = 1: the mean share of right answers; k = n: the share of problems with one
    assert reach.loc[1, "all"] == (1 + 0.25 + 0 + 0.5) / 4
    assert reach.loc[4, "all"] == 3 / 4
    assert reach.loc[4, "3 numbers"] == 1.0 and reach.loc[4, "4 numbers"] == 0.5
    # k = 2 of 4 with c = 1: 1 - C(3,2)/C(4,2) = 0.5; with c = 2: 1 - 1/6
    assert abs(reach.loc[2, "3 numbers"] - (1 + 0.5) / 2) < 1e-12
    assert abs(reach.loc[2, "4 numbers"] - (0 + 5 / 6) / 2) < 1e-12
    with pytest.raises(ValueError, match="same number of samples"):
        reach_table(counts.assign(n=[4, 4, 4, 8]))
