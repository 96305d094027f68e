"""Raw match rows drawn by hypothesis, shared by the tests of ``jaxrank.io.comparisons_from_rows``."""

from hypothesis import strategies as st

ROW_LISTS = st.lists(st.tuples(st.integers(0, 5), st.integers(1, 5), st.sampled_from([0.0, 0.5, 1.0, 0.25]),
                               st.sampled_from([0.0, 1.0, 2.5])), min_size=1, max_size=40)
"""Lists of ``(first item, offset to the second, p, weight)`` among 6 text ids (never an item against itself)."""


def row_columns(rows):
    """The columns ``(item_a, item_b, p, weight)`` of drawn rows, items named ``t0`` .. ``t5``."""
    a = [f"t{x}" for x, _, _, _ in rows]
    b = [f"t{(x + d) % 6}" for x, d, _, _ in rows]
    return a, b, [q for _, _, q, _ in rows], [v for _, _, _, v in rows]
