"""What the grader accepts from a kernel (autograder.verdicts.decode): plain data with its own memory."""
from __future__ import annotations

import pytest
import torch

from autograder.verdicts import Answer, decode, free_names
from helpers.runtime.remote import encode


def _sent(value) -> str:
    return repr(encode(value))  # what the kernel's user expression shows: the repr of the encoded text


def test_plain_data_comes_back_equal():
    value = {"loss": 1.5, "grads": [torch.arange(6.0).reshape(2, 3)], "shape": torch.Size([2, 3]), "ok": (True, None)}
    back = decode(_sent(value))
    assert back["loss"] == 1.5 and back["shape"] == torch.Size([2, 3]) and back["ok"] == (True, None)
    assert torch.equal(back["grads"][0], value["grads"][0])


def test_expanded_tensor_is_refused_before_it_is_copied():
    # 8 bytes in the kernel, 2 GiB once copied: the grader must not materialise it
    bomb = torch.zeros((), dtype=torch.float64).expand(2**28)
    with pytest.raises(Answer, match="overlapping elements"):
        decode(_sent({"step": bomb}))


def test_attributes_set_on_a_tensor_do_not_survive():
    t = torch.ones(3)
    t.item = complex  # a method shadowed in the kernel
    back = decode(_sent([t]))[0]
    assert back.item is not complex and torch.equal(back, torch.ones(3))


def test_code_is_not_data():
    class Sneaky:
        def __reduce__(self):
            return (print, ("ran in the grader",))
    with pytest.raises(Answer, match="not plain data"):
        decode(_sent(Sneaky()))


def test_oversized_answer_is_refused(monkeypatch):
    import autograder.verdicts as verdicts
    monkeypatch.setattr(verdicts, "MAX_ANSWER_CHARS", 100)
    with pytest.raises(Answer, match="at most"):
        decode(_sent(torch.zeros(1000)))


def test_free_names_are_what_the_cell_reads_without_defining():
    source = "import math as m\nx = 1\ndef f(a):\n    return a + y\nassert g(lambda b: b + z) == x + m.pi"
    assert free_names(source) == ["g", "y", "z"]


def test_the_kernels_cluster_errors_come_back_as_themselves():
    from autograder.verdicts import _exception
    from helpers.runtime.cluster import CollectiveTimeout, RankError

    timeout = _exception("CollectiveTimeout", "ranks [1] are stuck", {"unfinished": [1, "x"]})
    assert isinstance(timeout, CollectiveTimeout) and isinstance(timeout, TimeoutError)
    assert str(timeout) == "ranks [1] are stuck" and timeout.unfinished == [1]
    assert isinstance(_exception("RankError", "rank 1 raised ValueError", {}), RankError)
    assert type(_exception("ValueError", "no", {})) is ValueError
    assert str(_exception("SomethingOfTheirs", "boom", {})) == "SomethingOfTheirs: boom"
