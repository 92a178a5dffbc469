"""A tiny calculator."""


def add(a, b):
    """The sum of two numbers."""
    return a + b


def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) / (len(values) - 1)
