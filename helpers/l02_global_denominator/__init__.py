"""Lesson 02: unequal token counts require one global denominator.

The objective of one accumulation window is the mean loss over every *valid* (non-pad)
target token of every micro-batch on every rank,

    L = (1 / T) * sum over ranks r, micro-batches k, valid tokens i of loss_{r,k,i},
    T = sum_{r,k} n_{r,k}   (valid tokens of micro-batch k on rank r).

This module holds what the chapter and the assignment share: the per-token loss, the
lesson's model, on-rank drivers that call a student's function on a gloo group, checks
whose messages name the classic mistakes, the results stored with the course for the
visible tests, and the chapter's figures and explorer. The references that compute what
the exercises ask for live on the instructor's side (``autograder.lessons.l02``).

Units: counts are numbers of valid target tokens (integers); losses are nats per token;
"weights" are the factor multiplying one token's loss gradient in the combined gradient;
a "factor" is a token's weight under the mean of per-rank means divided by its weight
under the global mean.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from matplotlib.figure import Figure
from torch import nn

from helpers.runtime.cluster import CollectiveMismatch, CollectiveTimeout, RankError
from helpers.shared.data import TokenBatch, tensors_from_json
from helpers.runtime.ledger import Ledger
from helpers.shared.models import TinyLM
from helpers.shared.plots import COLORS
from helpers.shared.state import State, state_of
from helpers.shared.stored import load

MicroBatches = Sequence[TokenBatch]  # one rank's micro-batches of one accumulation window
INTEGER_DTYPES = ("int32", "int64")
LESSON_LM = {"dim": 8, "layers": 1}  # the lesson's TinyLM: one block of width 8 (1272 parameters)
EXPLORER_RANKS = 4
EXPLORER_COUNTS = (0, 1, 5, 20, 60, 200)  # the valid-token counts a rank can take in the explorer
STORED_REFERENCES = "02_visible_references"
STORED_FACTORS = "02_token_factors"

__all__ = [
    "token_cross_entropy", "tiny_lm", "LESSON_LM",
    "count_masks", "count_on_rank", "loss_and_gradient", "backward_report", "ddp_loss_gradients_on_rank",
    "train_on_rank",
    "collective_errors_explained", "assert_count_result", "assert_count_ledger", "assert_window_ledger",
    "assert_loss_value", "assert_gradients_match", "assert_training_matches", "assert_factors",
    "stored_reference", "stored_factors",
    "plot_denominator_bias", "plot_token_weights", "token_count_explorer",
]


# --------------------------------------------------------------------------- the per-token loss and the model


def token_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token cross-entropy in nats, shape ``targets.shape`` (padded positions included).

    ``logits`` is ``[batch, time, vocab]``. Padded positions get an ordinary (finite,
    meaningless) loss value: masking them out is the caller's job.
    """
    flat = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    return flat.view(targets.shape)


def tiny_lm(seed: int, **kwargs: Any) -> nn.Module:
    """The lesson's :class:`~helpers.shared.models.TinyLM` (``LESSON_LM``, overridden by ``kwargs``) under ``seed``.

    The global RNG is left untouched.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return TinyLM(**{**LESSON_LM, **kwargs})


# --------------------------------------------------------------------------- drivers
# (run with the notebook's code: remote.call, cluster.run)

MaskSpec = tuple[int, int, int]  # (rows, time, valid tokens) of one micro-batch mask


def count_masks(spec: Sequence[MaskSpec], seed: int = 0) -> list[torch.Tensor]:
    """Boolean masks ``[rows, time]`` with exactly ``valid`` True entries each.

    Valid positions are a per-row prefix spread over the rows (as padding on the right
    gives), shuffled over rows by ``seed``; building a 16.8-million-token mask takes
    milliseconds.
    """
    masks = []
    for k, (rows, time, valid) in enumerate(spec):
        if not 0 <= valid <= rows * time:
            raise ValueError(f"{valid} valid tokens do not fit a [{rows}, {time}] mask")
        per_row = torch.full((rows,), valid // rows, dtype=torch.long)
        per_row[: valid % rows] += 1
        per_row = per_row[torch.randperm(rows, generator=torch.Generator().manual_seed(seed + k))]
        masks.append(torch.arange(time).expand(rows, time) < per_row.unsqueeze(1))
    return masks


def count_on_rank(count_fn: Callable[..., Any], specs: Sequence[Sequence[MaskSpec]], seed: int = 0,
                  group_ranks: Sequence[int] | None = None) -> Any:
    """Call ``count_fn(masks, group)`` with this rank's masks ``count_masks(specs[rank])``.

    With ``group_ranks`` the call runs on that subgroup only (other ranks return ``None``).
    """
    rank = dist.get_rank()
    group = None
    if group_ranks is not None:
        group = dist.new_group(list(group_ranks))
        if rank not in group_ranks:
            return None
    return count_fn(count_masks(specs[rank], seed=seed + 100 * rank), group)


def backward_report(loss: Any, leaf: torch.Tensor) -> dict[str, Any]:
    """Plain facts about ``loss`` and one ``backward()`` from it to the leaf tensor ``leaf``.

    Returns ``{"loss": loss (detached if a tensor), "requires_grad": whether loss is a tensor
    with autograd history, "grad": d loss / d leaf}``. ``grad`` is ``None`` when no backward
    can run (not a 0-dim tensor with history) or when it does not reach ``leaf``.
    """
    is_tensor = isinstance(loss, torch.Tensor)
    requires_grad = bool(is_tensor and loss.requires_grad)
    grad = None
    if requires_grad and loss.dim() == 0:
        leaf.grad = None
        loss.backward()
        grad = None if leaf.grad is None else leaf.grad.detach().clone()
    return {"loss": loss.detach() if is_tensor else loss, "requires_grad": requires_grad, "grad": grad}


def loss_and_gradient(loss_fn: Callable[..., Any], token_losses: torch.Tensor, mask: torch.Tensor,
                      global_count: int, world_size: int = 1) -> dict[str, Any]:
    """Call ``loss_fn(token_losses, mask, global_count, world_size)`` and backpropagate its result.

    ``loss_fn`` gets a fresh leaf copy of ``token_losses`` that requires grad; returns
    :func:`backward_report` of the result with respect to that copy (plain data, so it runs
    where the notebook's code lives: ``helpers.runtime.remote.call(loss_and_gradient, loss_fn, ...)``).
    """
    leaf = token_losses.detach().clone().requires_grad_()
    return backward_report(loss_fn(leaf, mask, global_count, world_size), leaf)


def _ddp(model: nn.Module) -> nn.Module:
    from torch.nn.parallel import DistributedDataParallel as DDP

    return DDP(model)


def ddp_loss_gradients_on_rank(loss_fn: Callable[..., torch.Tensor], model_seed: int,
                               window: Sequence[MicroBatches], global_count: int) -> dict[str, Any]:
    """Backward ``loss_fn(token_losses, mask, global_count, world_size)`` through real DDP.

    Every rank builds the same TinyLM, wraps it in ``DistributedDataParallel`` and, for
    each of its micro-batches in ``window[rank]``, backpropagates ``loss_fn`` of the
    per-token losses (DDP averages over the ranks). Returns this rank's accumulated
    gradients and the local loss values.
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    model = tiny_lm(model_seed)
    ddp = _ddp(model)
    values = []
    for mb in window[rank]:
        loss = loss_fn(token_cross_entropy(ddp(mb.tokens), mb.targets), mb.mask, global_count, world_size)
        values.append(float(loss.detach()))
        loss.backward()
    grads = {n: (torch.zeros_like(p) if p.grad is None else p.grad.detach().clone())
             for n, p in model.named_parameters()}
    return {"grads": grads, "losses": values}


def train_on_rank(train_fn: Callable[..., Any], model_seed: int, windows: Sequence[Sequence[MicroBatches]],
                  lr: float, momentum: float, weight_decay: float = 0.0) -> dict[str, Any]:
    """Train a DDP-wrapped TinyLM with ``train_fn(ddp_model, optimizer, micro_batches)``.

    One call per window with this rank's micro-batches ``window[rank]``; the optimizer is
    ``SGD(lr, momentum, weight_decay)``. Returns this rank's final state and what each call returned.
    """
    rank = dist.get_rank()
    model = tiny_lm(model_seed)
    ddp = _ddp(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay)
    returned = [train_fn(ddp, opt, window[rank]) for window in windows]
    return {"state": state_of(model), "returned": returned}


# --------------------------------------------------------------------------- checks (run in the notebook process)


@contextmanager
def collective_errors_explained(what: str) -> Iterator[None]:
    """Turn a hang, a collective mismatch or a gloo abort of ``what`` into an AssertionError that teaches."""
    try:
        yield
    except CollectiveTimeout as exc:
        raise AssertionError(
            f"{what} did not finish: some ranks waited in a collective that another rank never "
            f"joined. A rank with zero valid tokens must still take part in every collective "
            f"(contribute a 0), or the others hang.\n{exc}"
        ) from None
    except RankError as exc:
        if "SIGABRT" not in str(exc) and "Connection reset" not in str(exc):
            raise
        raise AssertionError(
            f"{what}: a rank's process aborted inside a collective. gloo aborts when the ranks "
            f"issue different collectives at the same point, e.g. one rank skips forward/backward "
            f"(DDP's gradient all-reduce) because it has no valid tokens while the others run it. "
            f"Every rank must run the same collectives.\n{exc}"
        ) from None
    except CollectiveMismatch as exc:
        raise AssertionError(
            f"{what}: the ranks issued different collectives. A collective must have the same "
            f"op, dtype and shape on every rank, whatever the local masks look like: reduce one "
            f"count per rank, not a tensor whose size depends on the local data.\n{exc}"
        ) from None


def assert_count_result(per_rank: Sequence[Any], expected: int, case: str) -> None:
    """Every rank returned the Python int ``expected``."""
    for rank, got in enumerate(per_rank):
        if not isinstance(got, int) or isinstance(got, bool):
            raise AssertionError(f"[{case}] rank {rank} returned {got!r} ({type(got).__name__}); "
                                 f"return a Python int (e.g. int(count.item())).")
        if got != expected:
            hint = ""
            if expected > 2048 and abs(got - expected) <= 1e-3 * expected:
                hint = (" That is close, but not exact: float rounding. Counts must travel in an "
                        "exact integer dtype (torch.int64).")
            elif got < expected:
                hint = " Did every rank's count reach the all-reduce (a SUM over the group)?"
            raise AssertionError(f"[{case}] rank {rank} returned {got}, expected {expected} valid tokens "
                                 f"in the whole window.{hint}")


def assert_count_ledger(ledger: Ledger, ranks: Sequence[int], case: str) -> None:
    """Each of ``ranks`` issued exactly one integer SUM all-reduce, of one shape on every rank."""
    shapes = {}
    for rank in ranks:
        records = ledger.records[rank]
        if len(records) != 1:
            calls = ", ".join(r.describe() for r in records) or "none"
            raise AssertionError(
                f"[{case}] rank {rank} issued {len(records)} collectives ({calls}); the window count "
                f"needs exactly one: sum the local micro-batch counts first, then one all_reduce.")
        record = records[0]
        if record.op != "all_reduce" or "SUM" not in record.detail:
            raise AssertionError(f"[{case}] rank {rank} called {record.describe()}; use one "
                                 f"dist.all_reduce with ReduceOp.SUM.")
        if record.dtype not in INTEGER_DTYPES:
            raise AssertionError(
                f"[{case}] rank {rank} all-reduced its count as {record.dtype}. Counts must be exact: "
                f"float16 is exact only up to 2048 and overflows at 65504, float32 up to 2**24 "
                f"tokens. Use torch.int64.")
        shapes[rank] = record.shape
    if len(set(shapes.values())) > 1:
        raise AssertionError(f"[{case}] the count all-reduce had different shapes on different ranks "
                             f"({shapes}); it must be the same (e.g. one element) everywhere.")


def assert_window_ledger(ledger: Ledger, windows: int, case: str) -> None:
    """Over ``windows`` calls of ``train_window``, each rank issued at most ``windows`` collectives, on all ranks.

    The ledger records the ``torch.distributed`` calls (DDP's gradient all-reduce inside
    ``backward()`` runs in C++ and is not among them).
    """
    everyone = tuple(range(ledger.world_size))
    for rank, records in enumerate(ledger.records):
        if len(records) > windows:
            calls = ", ".join(r.describe() for r in records)
            raise AssertionError(
                f"[{case}] rank {rank} issued {len(records)} torch.distributed collectives over {windows} "
                f"windows ({calls}); the budget is one per window. What does every rank need to learn "
                f"from the others, and can it travel in one message?")
        outside = [r.describe() for r in records if r.group_ranks != everyone]
        if outside:
            raise AssertionError(f"[{case}] rank {rank} issued {outside} on a group other than the one "
                                 f"DDP averages over (all {ledger.world_size} ranks here).")


def assert_loss_value(got: Any, expected: float, case: str, world_size: int = 1) -> None:
    """``got`` is a finite 0-dim tensor equal to ``expected`` (relative 1e-6)."""
    if not isinstance(got, torch.Tensor) or got.dim() != 0:
        raise AssertionError(f"[{case}] expected a 0-dim tensor, got {got!r}")
    value = float(got.detach())
    if not math.isfinite(value):
        raise AssertionError(f"[{case}] the loss is {value}. A rank (or a window) with zero valid tokens "
                             f"must give a finite loss: never divide 0 by 0; guard with max(count, 1).")
    if math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-9):
        return
    hint = ""
    if expected and world_size > 1 and math.isclose(value * world_size, expected, rel_tol=1e-6):
        hint = (f" It is 1/{world_size} of the expected value: DDP divides the summed gradient by "
                f"world_size={world_size}, so the local loss must be multiplied by it.")
    raise AssertionError(f"[{case}] loss {value:.6g}, expected {expected:.6g}.{hint}")


def assert_gradients_match(got: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor],
                           biased: Mapping[str, torch.Tensor] | None, world_size: int, case: str,
                           atol: float = 1e-6, rtol: float = 1e-4) -> None:
    """DDP-averaged gradients ``got`` equal the global-mean gradient ``expected``."""
    for name, exp in expected.items():
        g = got[name].double()
        if not torch.isfinite(g).all():
            raise AssertionError(f"[{case}] gradient of {name!r} has NaN/inf: a zero-token rank "
                                 f"divided 0 by 0 somewhere.")
        if torch.allclose(g, exp, atol=atol, rtol=rtol):
            continue
        flat_g = torch.cat([got[n].double().reshape(-1) for n in expected])
        flat_e = torch.cat([e.reshape(-1) for e in expected.values()])
        scale = float(flat_g @ flat_e / (flat_e @ flat_e))
        hint = f" (Your gradients are about {scale:.3g}x the expected ones.)"
        if abs(scale * world_size - 1) < 0.02:
            hint = (f" Your gradients are 1/{world_size} of the global mean's: DDP divides by "
                    f"world_size={world_size}; multiply the local loss by it.")
        elif biased is not None:
            flat_b = torch.cat([b.reshape(-1) for b in biased.values()])
            if torch.allclose(flat_g, flat_b, atol=atol, rtol=rtol):
                hint = (" They equal the mean of per-rank means: each rank divided by its own "
                        "token count. Divide by the global count instead.")
        raise AssertionError(f"[{case}] gradient of {name!r} is not the global-mean gradient "
                             f"(max |diff| {float((g - exp).abs().max()):.3g}).{hint}")


def assert_training_matches(per_rank: Sequence[State], expected: State, case: str,
                            atol: float = 2e-5, rtol: float = 1e-4) -> None:
    """Every rank's trained state equals rank 0's and the float64 single-process reference."""
    for rank, state in enumerate(per_rank):
        for name, exp in expected.items():
            got = state[name].double()
            if not torch.isfinite(got).all():
                raise AssertionError(f"[{case}] rank {rank}: {name!r} holds NaN/inf after training.")
            if not torch.allclose(got, exp, atol=atol, rtol=rtol):
                raise AssertionError(
                    f"[{case}] rank {rank}: {name!r} differs from single-process training on the "
                    f"concatenated valid tokens (max |diff| {float((got - exp).abs().max()):.3g}). "
                    f"Check: one global count for the whole window (not per micro-batch or per "
                    f"rank), the world_size factor, and no optimizer step for a window without "
                    f"valid tokens.")


def assert_factors(fn: Callable[[list[int]], Sequence[float]],
                   cases: Sequence[tuple[Sequence[int], Sequence[float]]]) -> None:
    """``fn(counts)`` equals the expected factors of every ``(counts, expected)`` case (relative 1e-9)."""
    for counts, exp in cases:
        got = fn(list(counts))
        if len(got) != len(exp) or not all(math.isclose(float(a), b, rel_tol=1e-9) for a, b in zip(got, exp)):
            hint = ""
            if len(got) == len(exp) and all(math.isclose(float(a) * b, 1, rel_tol=1e-9) for a, b in zip(got, exp)):
                hint = " You returned the reciprocal: the factor is (mean-of-means weight) / (global weight)."
            raise AssertionError(f"mean_of_means_factors({list(counts)}) returned {list(got)}, "
                                 f"expected {list(exp)}.{hint}")


# --------------------------------------------------------------------------- results stored with the course


def stored_reference(case: str) -> dict[str, torch.Tensor]:
    """The float64 tensors a visible test compares with (``"loss_gradients"``, ...), stored with the course.

    The instructor side computes them with single-process references on the visible test's
    window; :data:`STORED_REFERENCES` lists the cases.
    """
    cases = load(STORED_REFERENCES)
    if case not in cases:
        raise KeyError(f"no stored reference {case!r}; stored: {sorted(cases)}")
    return tensors_from_json(cases[case])


def stored_factors(counts: Sequence[int]) -> list[float | None]:
    """Per rank, the stored factor ``T / (N n_r)`` for these counts (``None`` for a rank without tokens).

    Stored are the explorer's grid (``EXPLORER_RANKS`` ranks, counts from ``EXPLORER_COUNTS``)
    and the counts the chapter shows; other counts raise ``KeyError``.
    """
    key = ",".join(str(int(n)) for n in counts)
    table = load(STORED_FACTORS)
    if key not in table:
        raise KeyError(f"no stored factors for counts [{key}]: stored are {EXPLORER_RANKS} ranks with counts "
                       f"from {EXPLORER_COUNTS} and the chapter's examples")
    return table[key]


# --------------------------------------------------------------------------- figures and explorer



def plot_denominator_bias(imbalance: Sequence[float], errors: Mapping[str, Sequence[float]],
                          *, title: str = "Gradient error against the global-mean gradient") -> Figure:
    """Relative gradient error (log scale) against the count imbalance ``n_max / n_min``.

    ``errors[label][i]`` is ``|g - g_global| / |g_global|`` at ``imbalance[i]``, e.g. measured
    with DDP on a gloo group for each normalisation rule.
    """
    fig = Figure(figsize=(7.0, 4.0), layout="constrained")
    ax = fig.add_subplot()
    floor = 1e-9
    for k, (label, err) in enumerate(errors.items()):
        ax.plot(imbalance, [max(e, floor) for e in err], marker="os^v"[k % 4], lw=1.6,
                color=COLORS[k % len(COLORS)], label=label)
    ax.set_yscale("log")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(imbalance), [f"{x:g}" for x in imbalance])
    ax.set_xlabel("count imbalance n_max / n_min (ratio of valid-token counts, log scale)")
    ax.set_ylabel("relative gradient error |g − g_global| / |g_global|")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_token_weights(counts: Sequence[int], factors: Sequence[float | None], *,
                       title: str = "Weight of one valid token's gradient") -> Figure:
    """Per-rank weight of a token under the global mean (``1/T``) and under the mean of per-rank means.

    ``factors[r]`` is rank ``r``'s factor (e.g. from :func:`stored_factors`), ``None`` for a
    rank without tokens: its tokens' weight under the mean of means is then ``factor / T``,
    and a rank without tokens has no token to weigh (0 under both rules).
    """
    total = sum(counts)
    global_weight = [1.0 / total if n and total else 0.0 for n in counts]
    mean_of_means = [f / total if f is not None and total else 0.0 for f in factors]
    fig = Figure(figsize=(7.0, 3.4), layout="constrained")
    ax = fig.add_subplot()
    ranks = range(len(counts))
    for k, (label, weights) in enumerate((("global mean: 1/T", global_weight),
                                          ("mean of per-rank means: 1/(N·n_r)", mean_of_means))):
        ax.bar([r - 0.2 + 0.4 * k for r in ranks], weights, width=0.4, color=COLORS[k], label=label)
    ax.set_xticks(list(ranks), [f"rank {r}\n{n} tokens" for r, n in zip(ranks, counts)])
    ax.set_xlabel("rank and its valid-token count n_r")
    ax.set_ylabel("weight per token")
    ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def token_count_explorer(counts: Sequence[int] = (60, 20, 5, 0)) -> Any:
    """Sliders for the valid-token count of each of ``EXPLORER_RANKS`` ranks (0 allowed) of one window.

    Each slider takes the counts ``EXPLORER_COUNTS``. Shows the global count T, each rank's
    stored over-weighting factor ``T / (N n_r)`` under the mean of per-rank means, and a bar
    plot of the per-token weights. ``update()`` returns the numbers as a dict (so the
    explorer also runs headless).
    """
    import ipywidgets as W
    from helpers.shared.plots import show_figures

    if len(counts) != EXPLORER_RANKS or any(n not in EXPLORER_COUNTS for n in counts):
        raise ValueError(f"the explorer has {EXPLORER_RANKS} ranks with counts from {EXPLORER_COUNTS}, got {counts}")
    style, layout = {"description_width": "110px"}, W.Layout(width="460px")
    sliders = [W.SelectionSlider(options=list(EXPLORER_COUNTS), value=int(n), description=f"rank {r} tokens",
                                 style=style, layout=layout, continuous_update=False)
               for r, n in enumerate(counts)]
    summary, out = W.HTML(), W.Output()

    def update(*_: Any) -> dict[str, Any]:
        current = [int(s.value) for s in sliders]
        total, world_size = sum(current), len(current)
        factors = stored_factors(current)
        result = {"counts": current, "global_count": total, "factors": factors}
        parts = [f"rank {r}: ×{f:.3g}" if f is not None else f"rank {r}: no tokens"
                 for r, f in enumerate(factors)]
        summary.value = (f"<b>global count</b> T = {total} &nbsp;·&nbsp; local loss on rank r = "
                         f"N · (sum of its token losses) / T = {world_size} · S_r / {max(total, 1)}<br>"
                         f"<b>mean of means over-weights each token by</b> " + ", ".join(parts))
        show_figures(out, [plot_token_weights(current, factors)], dpi=90)
        box.last_result = result
        return result

    for s in sliders:
        s.observe(update, names="value")
    box = W.VBox([*sliders, summary, out])
    box.controls = sliders
    box.update = update
    update()
    return box
