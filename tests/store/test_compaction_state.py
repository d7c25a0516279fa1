"""The compaction state kept beside a conversation's messages (``StateStore``), on every
backend: read back as written, by a store opened again on the same database; replaced only
over the version its writer read, so of workers that compact one conversation at once one
wins and the others read what it wrote; gone with the conversation."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

import contextfold as cf
from contextfold.errors import ConfigurationError
from contextfold.stores import BaseStore


def test_a_state_is_read_back_by_a_store_opened_again(
    open_store: Callable[..., BaseStore],
) -> None:
    store = open_store()
    assert store.get_state("c1") is None
    assert store.put_state("c1", '{"prefix": [1, 2]}', after=0)
    assert store.put_state("c1", '{"prefix": [1, 2, 3]}', after=1)
    assert open_store().get_state("c1") == (2, '{"prefix": [1, 2, 3]}')
    assert store.get_state("c2") is None  # each conversation its own


def test_a_writer_behind_the_stored_version_loses(store: BaseStore) -> None:
    assert store.put_state("c1", "first", after=0)
    assert not store.put_state("c1", "late", after=0)  # another wrote version 1 first
    assert store.put_state("c1", "second", after=1)
    assert not store.put_state("c1", "stale", after=1)
    assert not store.put_state("c1", "ahead", after=7)
    assert store.get_state("c1") == (2, "second")


def test_of_writers_racing_from_one_version_exactly_one_wins(
    open_store: Callable[..., BaseStore],
) -> None:
    stores = [open_store() for _ in range(4)]
    stores[0].put_state("c1", "base", after=0)
    won: list[int] = []
    barrier = threading.Barrier(len(stores))

    def write(k: int) -> None:
        barrier.wait()
        if stores[k].put_state("c1", f"worker {k}", after=1):
            won.append(k)

    threads = [threading.Thread(target=write, args=(k,)) for k in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert stores[0].get_state("c1") == (2, f"worker {won[0]}")


def test_clear_takes_the_state_with_the_messages(store: BaseStore) -> None:
    store.append("c1", [cf.Message("user", "hi")])
    store.put_state("c1", "state", after=0)
    store.clear("c1")
    assert store.get_state("c1") is None


@pytest.mark.parametrize("after", [-1, True, "1", 1.0])
def test_a_version_must_be_a_whole_number(store: BaseStore, after: object) -> None:
    with pytest.raises(ConfigurationError):
        store.put_state("c1", "state", after=after)  # type: ignore[arg-type]
