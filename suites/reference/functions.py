"""State functions the reference suites share."""

from __future__ import annotations


class SumToStr:
    """Flink's test aggregate: long sum of ints, result as a string."""

    def create_accumulator(self):
        return 0

    def add(self, value, acc):
        return acc + value

    def get_result(self, acc):
        return str(acc)

    def merge(self, a, b):
        return a + b
