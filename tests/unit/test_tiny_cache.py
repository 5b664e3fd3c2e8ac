"""The warm-started tiny model's cache: a name that changes with anything that changes the model, a copy that is
whole or absent, and a cache that cannot be written costing only the next build."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch")

from whileai.training.tiny import WarmStart, agent_model_key, from_cache, to_cache

CONVERSATIONS = [[{"role": "user", "content": "refund ORD-1"}, {"role": "assistant", "content": "done"}]]


def lookup(order_id: str) -> str:
    """Look an order up.

    Args:
        order_id: the order.
    """
    return order_id


def cancel(order_id: str) -> str:
    """Cancel an order.

    Args:
        order_id: the order.
    """
    return order_id


def test_the_name_changes_with_whatever_makes_another_model() -> None:
    base = agent_model_key(CONVERSATIONS, [lookup], {"hidden_size": 64}, WarmStart(10), seed=0)
    assert base == agent_model_key(CONVERSATIONS, [lookup], {"hidden_size": 64}, WarmStart(10), seed=0)
    others = [
        agent_model_key(CONVERSATIONS, [lookup], {"hidden_size": 64}, WarmStart(10), seed=1),
        agent_model_key(CONVERSATIONS, [lookup], {"hidden_size": 32}, WarmStart(10), seed=0),
        agent_model_key(CONVERSATIONS, [lookup], {"hidden_size": 64}, WarmStart(11), seed=0),
        agent_model_key(CONVERSATIONS, [lookup], {"hidden_size": 64}, None, seed=0),
        agent_model_key(CONVERSATIONS, [cancel], {"hidden_size": 64}, WarmStart(10), seed=0),
        agent_model_key(CONVERSATIONS * 2, [lookup], {"hidden_size": 64}, WarmStart(10), seed=0),
    ]
    assert len({base, *others}) == len(others) + 1


def test_a_model_goes_in_whole_and_comes_back_whole(tmp_path: Path) -> None:
    built = tmp_path / "built"
    built.mkdir()
    (built / "model.safetensors").write_bytes(b"weights")
    (built / "warm_start.json").write_text("{}")
    cache = tmp_path / "cache"
    assert not from_cache(tmp_path / "run", "k", cache)
    to_cache(built, "k", cache)
    to_cache(built, "k", cache)  # a second run that built it too: its copy is dropped
    assert sorted(p.name for p in cache.iterdir()) == ["k"]
    assert from_cache(tmp_path / "run", "k", cache)
    assert (tmp_path / "run" / "model.safetensors").read_bytes() == b"weights"


def test_a_copy_without_its_last_file_is_no_model(tmp_path: Path) -> None:
    half = tmp_path / "cache" / "k"
    half.mkdir(parents=True)
    (half / "model.safetensors").write_bytes(b"weights")  # warm_start.json, written last, is missing
    assert not from_cache(tmp_path / "run", "k", tmp_path / "cache")


def test_a_cache_that_cannot_be_written_is_no_error(tmp_path: Path) -> None:
    built = tmp_path / "built"
    built.mkdir()
    (built / "warm_start.json").write_text("{}")
    (tmp_path / "a file").write_text("")
    to_cache(built, "k", tmp_path / "a file" / "cache")  # no folder can be made there
    assert not from_cache(tmp_path / "run", "k", tmp_path / "a file" / "cache")


def test_a_second_build_of_the_same_model_waits_for_the_first(tmp_path: Path) -> None:
    import threading
    import time

    from whileai.training.tiny import building

    order: list[str] = []
    started = threading.Event()

    def first() -> None:
        with building("k", tmp_path):
            started.set()
            time.sleep(0.5)
            order.append("first done")

    thread = threading.Thread(target=first)
    thread.start()
    started.wait(10)
    with building("k", tmp_path):  # held by the first until it is done
        order.append("second in")
    with building("other", tmp_path):  # another model: no wait
        pass
    thread.join()
    assert order == ["first done", "second in"]
