"""Tests for grpo_lib.profiles (size profiles) and grpo_lib.display (notebook helpers)."""
import pytest
import torch

from grpo_lib import display, profiles
from grpo_lib.profiles import Profile, profile


@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def fake_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)


def test_default_profile_is_cpu_without_cuda(monkeypatch, no_cuda):
    monkeypatch.delenv("GRPO_PROFILE", raising=False)
    P = profile()
    assert (P.name, P.device, P.dtype) == ("cpu", "cpu", torch.float32)
    assert str(P) == "profile=cpu device=cpu dtype=float32"


def test_default_profile_is_gpu_with_cuda(monkeypatch, fake_cuda):
    monkeypatch.delenv("GRPO_PROFILE", raising=False)
    P = profile()
    assert (P.name, P.device, P.dtype) == ("gpu", "cuda", torch.bfloat16)


def test_environment_variable_overrides_and_is_normalised(monkeypatch, no_cuda):
    monkeypatch.setenv("GRPO_PROFILE", "  Smoke ")
    assert profile().name == "smoke" and profile().is_smoke
    monkeypatch.setenv("GRPO_PROFILE", "")
    assert profile().name == "cpu"  # empty means "not set"


def test_argument_beats_environment(monkeypatch, no_cuda):
    monkeypatch.setenv("GRPO_PROFILE", "smoke")
    assert profile("cpu").name == "cpu"


def test_smoke_on_a_gpu_machine_still_uses_the_gpu(monkeypatch, fake_cuda):
    monkeypatch.setenv("GRPO_PROFILE", "smoke")
    P = profile()
    assert (P.name, P.device, P.dtype) == ("smoke", "cuda", torch.bfloat16)


def test_unknown_profile_error_names_the_value_and_the_choices(monkeypatch, no_cuda):
    monkeypatch.setenv("GRPO_PROFILE", "laptop")
    with pytest.raises(ValueError, match=r"Unknown profile 'laptop' \(from GRPO_PROFILE\)"
                                         r".*'smoke', 'cpu', 'gpu'"):
        profile()
    with pytest.raises(ValueError, match=r"'fast' \(from argument\)"):
        profile("fast")


def test_gpu_profile_without_cuda_says_what_to_do(monkeypatch, no_cuda):
    monkeypatch.setenv("GRPO_PROFILE", "gpu")
    with pytest.raises(RuntimeError, match="no CUDA device.*GRPO_PROFILE"):
        profile()


def test_pick_returns_the_profiles_value():
    values = dict(smoke=2, cpu=50, gpu=400)
    for name, expected in values.items():
        P = Profile(name=name, device="cpu", dtype=torch.float32)
        assert P.pick(**values) == expected
        assert P.is_smoke == (name == "smoke")
    with pytest.raises(TypeError):  # every profile's value is required
        Profile("cpu", "cpu", torch.float32).pick(smoke=1, cpu=2)


def test_profiles_constant_lists_the_three_profiles():
    assert profiles.PROFILES == ("smoke", "cpu", "gpu")
    assert profiles.ENV_VAR == "GRPO_PROFILE"


# --- display ----------------------------------------------------------------------

def _sample_function(x, y=2):
    """Add two numbers: :math:`x + y`."""
    total = x + y  # the one line of work
    return total


def test_show_source_prints_header_and_code_outside_ipython(capsys):
    display.show_source(_sample_function)
    out = capsys.readouterr().out
    first = out.splitlines()[0]
    assert first.startswith("# ") and "test_profiles_display.py, line " in first
    assert "def _sample_function(x, y=2):" in out
    assert '"""Add two numbers' in out and "total = x + y" in out


def test_show_source_can_drop_the_docstring(capsys):
    display.show_source(_sample_function, docstring=False)
    out = capsys.readouterr().out
    assert "Add two numbers" not in out
    assert "def _sample_function(x, y=2):" in out and "return total" in out


def test_say_prints_its_markdown_outside_ipython(capsys):
    display.say("accuracy rose to **0.9**")
    assert capsys.readouterr().out == "accuracy rose to **0.9**\n"


def test_show_source_on_a_library_function_names_its_module(capsys):
    display.show_source(profile, max_lines=None)
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("# grpo_lib/profiles.py, line ")


def test_show_source_names_the_module_of_a_decorated_function(capsys):
    from grpo_lib import losses

    display.show_source(losses._masked_mean)  # under @torch.no_grad()
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("# grpo_lib/losses.py, line ")


def test_show_source_rejects_objects_without_python_source():
    with pytest.raises(TypeError, match="show_source needs a function or class"):
        display.show_source(len)
    with pytest.raises(TypeError, match="show_source needs a function or class"):
        display.show_source(42)


def _long_function(values):
    """Ten steps, each on a line of its own."""
    total = 0
    total += values[0]  # step 1
    total += values[1]  # step 2
    total *= 2  # the idea
    total -= 1  # after the idea
    return total


def test_show_source_shows_a_part_between_two_texts(capsys):
    display.show_source(_long_function, start="# step 2", end="# the idea")
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "lines " in lines[0] and "_long_function" in lines[0]
    assert lines[1:3] == ["total += values[1]  # step 2", "total *= 2  # the idea"]
    assert "step 1" not in out and "after the idea" not in out
    assert "max_lines=None" in lines[-1]


def test_show_source_names_a_missing_anchor():
    with pytest.raises(ValueError, match="no line contains start='nowhere'"):
        display.show_source(_long_function, start="nowhere")
    with pytest.raises(ValueError, match="end='# step 1'"):
        display.show_source(_long_function, start="# step 2", end="# step 1")


def test_show_source_refuses_walls_and_wide_lines(capsys):
    with pytest.raises(ValueError, match="would show 8 lines; the book shows at most 5"):
        display.show_source(_long_function, max_lines=5)
    display.show_source(_long_function, max_lines=None)  # a reader may see it all
    assert "after the idea" in capsys.readouterr().out

    def wide():
        return ("a string long enough to pass the column width of the book page", "and more")

    with pytest.raises(ValueError, match="shown line 2 has 89 characters"):
        display.show_source(wide)


def test_environment_has_versions_device_and_profile(monkeypatch, no_cuda):
    monkeypatch.setenv("GRPO_PROFILE", "smoke")
    info = display.environment()
    assert info["torch"] == torch.__version__
    assert info["device"].startswith("CPU (")
    assert "torch kernels" in info["cpu"] and info["cpu"].split(";")[0].strip()
    assert info["profile"] == "profile=smoke device=cpu dtype=float32"
    for key in ("python", "transformers", "tokenizers", "datasets", "trl"):
        assert info[key]


def test_print_environment_prints_one_aligned_line_per_item(capsys, monkeypatch, no_cuda):
    monkeypatch.setenv("GRPO_PROFILE", "cpu")
    display.print_environment()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(display.environment())
    assert lines[-1] == "     profile: profile=cpu device=cpu dtype=float32"
    assert all(line[12:14] == ": " for line in lines)
