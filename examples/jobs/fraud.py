"""A fraud score over two keyed stages, written only with statechaos's public job API.

- ``cards`` (keyed by card): a ListState of the card's last amounts, a MapState of how often it
  paid each merchant; each transaction gets an integer score from both.
- a filter drops low scores between the stages.
- ``merchants`` (keyed by merchant): a ReducingState sums the scores of its flagged transactions
  (a sum: the same at a checkpoint whatever order the cards' records arrived in).

``build_broken`` keeps the cards' recent amounts in a Python dict instead of the ListState: scores
after a restart are computed from lost history, and the oracles name the transactions whose
``(txn_id, score)`` changed.
"""

from __future__ import annotations

import operator
from typing import Any

from harness import (
    ExactlyOnceFileSinkSpec,
    GeneratorSource,
    JobBuilder,
    JobGraph,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    RuntimeContext,
)

CARDS_PER_SPLIT = 7
MERCHANTS = 11


def transaction(split: int, offset: int) -> dict[str, Any]:
    """A card belongs to one split, so its transactions reach ``cards`` in offset order."""
    return {
        "txn_id": f"t{split}-{offset}",
        "card": f"c{split}-{offset % CARDS_PER_SPLIT}",
        "merchant": f"m{(offset * 7 + split) % MERCHANTS}",
        "amount": (offset * 37 + split * 11) % 500,
    }


def _score(amount: int, recent: list[int], visits: int) -> int:
    avg = sum(recent) // len(recent) if recent else amount
    return max(0, amount - avg) // 10 + (5 if visits == 0 else 0)


class CardProfile(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.recent = ctx.get_state(ListStateDescriptor("recent_amounts"))
        self.merchants = ctx.get_state(MapStateDescriptor("merchant_visits"))

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        recent = list(self.recent.get() or [])  # None when the list is empty
        visits = self.merchants.get(value["merchant"]) or 0
        score = _score(value["amount"], recent, visits)
        self.recent.update((recent + [value["amount"]])[-5:])
        self.merchants.put(value["merchant"], visits + 1)
        ctx.collect({"txn_id": value["txn_id"], "merchant": value["merchant"], "score": score})


class BrokenCardProfile(CardProfile):
    """BUG: the recent amounts live in a Python dict, lost on every restart."""

    def open(self, ctx: RuntimeContext) -> None:
        super().open(ctx)
        self.ctx = ctx
        self.by_card: dict[Any, list[int]] = {}

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        recent = self.by_card.get(ctx.current_key, [])
        visits = self.merchants.get(value["merchant"]) or 0
        score = _score(value["amount"], recent, visits)
        self.by_card[ctx.current_key] = (recent + [value["amount"]])[-5:]
        self.merchants.put(value["merchant"], visits + 1)
        ctx.collect({"txn_id": value["txn_id"], "merchant": value["merchant"], "score": score})


class MerchantRisk(KeyedProcessFunction):
    def open(self, ctx: RuntimeContext) -> None:
        self.total = ctx.get_state(ReducingStateDescriptor("flagged_score", operator.add))

    def process_element(self, value: Any, ctx: RuntimeContext) -> None:
        self.total.add(value["score"])
        ctx.collect({**value, "flagged": True})


def _card(r: dict[str, Any]) -> str:
    return r["card"]


def _merchant(r: dict[str, Any]) -> str:
    return r["merchant"]


def _suspicious(r: dict[str, Any]) -> bool:
    return r["score"] >= 10


def _txn_score(r: dict[str, Any]) -> tuple[str, int]:
    return (r["txn_id"], r["score"])


def _graph(profile: KeyedProcessFunction, splits: int, per_split: int, parallelism: int) -> JobGraph:
    return (
        JobBuilder("fraud", max_parallelism=64)
        .source("transactions", GeneratorSource(transaction, splits, per_split), parallelism)
        .key_by(_card)
        .process("cards", profile, parallelism)
        .filter(_suspicious, name="suspicious")
        .key_by(_merchant)
        .process("merchants", MerchantRisk(), parallelism)
        .sink(ExactlyOnceFileSinkSpec())
        .output(identity=_txn_score, identity_name="(txn_id, score)")
        .build()
    )


def build(splits: int = 16, per_split: int = 600, parallelism: int = 2) -> JobGraph:
    return _graph(CardProfile(), splits, per_split, parallelism)


def build_broken(splits: int = 16, per_split: int = 600, parallelism: int = 2) -> JobGraph:
    return _graph(BrokenCardProfile(), splits, per_split, parallelism)
