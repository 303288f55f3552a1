"""Small statistics helpers."""


def median(values):
    """The median of a list of numbers."""
    middle = len(values) // 2
    return values[middle]
