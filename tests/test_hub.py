"""grpo_lib.hub: where the Hugging Face hub is out of reach, loading fails at once (no
retries), with the book's message, and the libraries' offline switches come back."""
from __future__ import annotations

import socket
import time

import datasets
import pytest
from huggingface_hub import constants

from grpo_lib import hub
from grpo_lib.models import load_model_and_tokenizer
from grpo_lib.tasks import load_task_split

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing listens, refused at once


@pytest.fixture
def no_hub(monkeypatch):
    """The hub's endpoint at a closed local port, no proxy, no offline variable."""
    for name in (*hub.OFFLINE_VARIABLES, *hub._PROXIES):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "ENDPOINT", NOWHERE)


def test_offline_variables_are_read_at_the_call(monkeypatch):
    for name in hub.OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert not hub.offline_requested()
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert hub.offline_requested()
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "0")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "yes")
    assert hub.offline_requested()


def test_a_closed_endpoint_is_out_of_reach_and_a_proxy_is_trusted(no_hub, monkeypatch):
    assert not hub.hub_reachable(timeout=2.0)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.example:3128")
    assert hub.hub_reachable(timeout=2.0)  # only the proxy could tell


def test_hub_access_switches_offline_mode_on_and_back(no_hub, monkeypatch):
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # online before, so the
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", False)  # switch is seen
    flags = (constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE)
    with hub.hub_access(timeout=2.0) as online:
        assert online is False
        assert constants.HF_HUB_OFFLINE and datasets.config.HF_HUB_OFFLINE
    assert (constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE) == flags
    with pytest.raises(RuntimeError), hub.hub_access(timeout=2.0):
        raise RuntimeError("the body fails")
    assert (constants.HF_HUB_OFFLINE, datasets.config.HF_HUB_OFFLINE) == flags


def test_hub_access_is_online_where_the_endpoint_answers(monkeypatch):
    for name in hub.OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(hub, "hub_reachable", lambda timeout=3.0: True)
    flag = constants.HF_HUB_OFFLINE
    with hub.hub_access() as online:
        assert online is True and constants.HF_HUB_OFFLINE == flag  # untouched


def test_gsm8k_without_a_hub_fails_at_once(no_hub, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path))
    start = time.perf_counter()
    with pytest.raises(OSError, match="out of reach from here.*HF_DATASETS_OFFLINE"):
        load_task_split("gsm8k", "train")
    assert time.perf_counter() - start < 20  # no retries with back-off (23 s a file)
    assert "Retrying" not in capfd.readouterr().err


def test_a_hub_model_without_a_hub_fails_at_once(no_hub, tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    start = time.perf_counter()
    with pytest.raises(OSError, match="out of reach from here.*tiny-qwen2-base"):
        load_model_and_tokenizer("Qwen/Qwen2.5-0.5B-Instruct")
    assert time.perf_counter() - start < 20
    assert "Retrying" not in capfd.readouterr().err


def test_a_hanging_name_lookup_is_out_of_reach_in_time(no_hub, monkeypatch):
    """The socket's timeout does not cover the resolver; the probe's own does."""
    def hangs(*args, **kwargs):
        time.sleep(30)
        raise socket.gaierror("the lookup gave up")  # as a resolver ends, at last

    monkeypatch.setattr(hub.socket, "create_connection", hangs)
    monkeypatch.setattr(constants, "ENDPOINT", "https://hangs.example")
    start = time.perf_counter()
    assert not hub.hub_reachable(timeout=0.5)
    assert time.perf_counter() - start < 5
