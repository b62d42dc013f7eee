"""grpo_lib.packing: packed products where they pay, the mode that overrides it."""
import json
import subprocess
import sys

import pytest
import torch

from grpo_lib import packing as pk
from grpo_lib.packing import (pack_for_rows, pack_if_it_pays, packed_product, packing,
                              packing_mode, packing_pays)

PACKABLE = pk.packing_applies(torch.zeros(1))


def test_modes_decide_without_measuring():
    calls = pk._packed_is_faster.cache_info().currsize
    with packing("always"):
        assert packing_mode() == "always" and packing_pays(3, 5, 7)
        with packing("never"):
            assert not packing_pays(3, 5, 7)
        assert packing_mode() == "always"  # the inner block restored it
    assert pk._packed_is_faster.cache_info().currsize == calls  # nothing timed


def test_a_bad_mode_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="always"):
        with packing("sometimes"):
            pass


def test_the_environment_sets_the_mode_and_a_bad_value_is_refused():
    code = "import grpo_lib.packing as p; print(p.packing_mode())"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"GRPO_LIB_PACKING": "Never", "PATH": ""}, timeout=120)
    assert run.stdout.strip() == "never", run.stderr
    bad = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"GRPO_LIB_PACKING": "yes", "PATH": ""}, timeout=120)
    assert bad.returncode != 0 and "GRPO_LIB_PACKING='yes'" in bad.stderr


@pytest.fixture(autouse=True)
def own_decisions_file(tmp_path, monkeypatch):
    """Each test keeps its measured decisions in its own folder, not the reader's."""
    monkeypatch.setenv("GRPO_LIB_CACHE", str(tmp_path))
    pk._packed_is_faster.cache_clear()
    yield
    pk._packed_is_faster.cache_clear()


@pytest.mark.skipif(not PACKABLE, reason="this torch has no oneDNN")
def test_auto_measures_once_per_shape_and_returns_a_decision():
    with packing("auto"):
        first = packing_pays(40, 24, 16)
        info = pk._packed_is_faster.cache_info()
        assert packing_pays(33, 24, 16) == first  # 33 and 40 rows share the bucket 64
        assert pk._packed_is_faster.cache_info().hits == info.hits + 1
    assert isinstance(first, bool)


def test_where_packing_does_not_apply_there_is_nothing_to_pack():
    weight = torch.randn(8, 4)
    with packing("always"):
        assert pack_if_it_pays(weight.bfloat16(), 4) is None
        assert pack_for_rows(weight.bfloat16(), 4) is None
    with packing("never"):
        assert pack_if_it_pays(weight, 4) is None


@pytest.mark.skipif(not PACKABLE, reason="this torch has no oneDNN")
def test_a_packed_product_is_the_plain_one():
    g = torch.Generator().manual_seed(0)
    x, weight, bias = (torch.randn(*s, generator=g) for s in ((6, 8), (8, 4), (4,)))
    with packing("always"):
        packed = pack_if_it_pays(weight, 6)
    assert packed is not None
    torch.testing.assert_close(packed_product(x, packed, bias), x @ weight + bias,
                               rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not PACKABLE, reason="this torch has no oneDNN")
def test_a_decision_is_kept_for_the_next_process(monkeypatch):
    """The first measurement is written to the decisions file; a later process (here:
    the same one with its memory cleared) reads it instead of timing again, so a
    seeded run repeats itself on the same machine."""
    with packing("auto"):
        first = packing_pays(64, 24, 16)
    stored = json.loads(pk.decisions_file().read_text())
    (key, value), = stored.items()
    assert value is first and key.endswith("| 64x24x16")
    stored[key] = not first  # as if an earlier process had measured the other way
    pk.decisions_file().write_text(json.dumps(stored))
    pk._packed_is_faster.cache_clear()
    monkeypatch.setattr(pk, "_measure", lambda *shape: pytest.fail("timed again"))
    with packing("auto"):
        assert packing_pays(64, 24, 16) is (not first)


def test_a_damaged_or_unwritable_decisions_file_costs_a_measurement_only(
        tmp_path, monkeypatch):
    pk.decisions_file().parent.mkdir(parents=True, exist_ok=True)
    pk.decisions_file().write_text("{not json")
    monkeypatch.setattr(pk, "_measure", lambda *shape: True)
    with packing("auto"):
        assert packing_pays(8, 4, 4) is True  # measured again, file rewritten
    assert json.loads(pk.decisions_file().read_text())
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    monkeypatch.setenv("GRPO_LIB_CACHE", str(blocker / "below_a_file"))
    pk._packed_is_faster.cache_clear()
    with packing("auto"):
        assert packing_pays(8, 4, 4) is True  # nowhere to write: this process only
