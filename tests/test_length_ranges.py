"""Curves split at the longest training length, and lengths named compactly."""

import pytest

from pe_research.evaluation.group_summary import lengths_text, range_means


def test_range_means_split_at_the_longest_training_length():
    assert range_means([100, 90, 40, 10], [4, 8, 12, 13], 8) == pytest.approx((95.0, 25.0))
    assert range_means([100, 50, 0], [8, 9, 10], 8) == pytest.approx((100.0, 25.0))


@pytest.mark.parametrize(("lengths", "text"), [
    ([12, 13, 14], "12-14"), ([14, 12, 13], "12-14"), ([8, 12, 16], "8, 12, 16"), ([9], "9")])
def test_lengths_text(lengths, text):
    assert lengths_text(lengths) == text
