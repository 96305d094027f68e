"""Comparisons from columns of raw rows in memory (evalica's input form), vectorised: :func:`comparisons_from_rows`.

Private to :mod:`jaxrank.io` (which re-exports :func:`comparisons_from_rows`); the item ids are read as
:func:`jaxrank.io.read_comparisons` reads them (:func:`_item_id`, :func:`_blank`).
"""

from __future__ import annotations

import collections
import operator

import numpy as np


def _blank(v) -> bool:
    """None, NaN, pandas' NA/NaT, or a string of blanks."""
    if v is None or type(v).__name__ in ("NAType", "NaTType"):
        return True
    if isinstance(v, (float, np.floating)):
        return bool(np.isnan(v))
    return str(v).strip() == ""


def _item_id(value) -> str:
    """An item id as text: surrounding blanks dropped (``" x"`` is ``"x"``), a number as Python writes it
    (the JSON number ``1`` and the string ``"1"`` name the same item; ``1.0`` is another). A JSON boolean is
    no id (``ValueError``: the caller names the place)."""
    if isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{value!r} is a JSON boolean, not an item id")
    return str(value).strip()


def _column(name, values) -> list:
    """A column of item ids as a Python list (a list, tuple, NumPy array or pandas Series); a list is itself
    (read, never changed: no copy)."""
    if type(values) is list:
        return values
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise ValueError(f"{name} must be a sequence of item ids (list, NumPy array, pandas Series), "
                         f"got {type(values).__name__}")
    return values.tolist() if hasattr(values, "tolist") else list(values)


def _floats(name, values):
    """``values`` as a float64 array; one that is no number is a ``ValueError`` naming ``name`` and its row."""
    try:
        return np.asarray(values, np.float64)
    except (TypeError, ValueError) as e:
        flat = values.tolist() if hasattr(values, "tolist") else values
        if isinstance(flat, (list, tuple)):
            for k, v in enumerate(flat):
                try:
                    float(v)
                except (TypeError, ValueError):
                    raise ValueError(f"{name}, row {k}: {v!r} is not a number") from None
        raise ValueError(f"{name} must be numbers ({e})") from None


def _pandas_codes(x) -> bool:
    """A pandas Series of a typed dtype (Arrow strings, integers): numbered by pandas' own hash table in
    C++ (:func:`_series_codes`); an object Series goes through Python's dictionary (as fast there)."""
    return type(x).__module__.split(".")[0] == "pandas" and type(x).__name__ == "Series" and x.dtype != object


def _series_codes(a, b):
    """:func:`_item_codes` for two typed pandas Series: interleaved row by row (``take``) and numbered by
    ``pandas.factorize`` without making a Python object per row."""
    import pandas as pd  # the caller passed pandas Series, so pandas is loaded already

    m = len(a)
    order = np.empty(2 * m, np.int64)
    order[0::2], order[1::2] = np.arange(m), np.arange(m, 2 * m)
    both = pd.concat([a, b], ignore_index=True).take(order)
    codes, uniques = pd.factorize(both)
    if (codes < 0).any():
        at = int(np.argmax(codes < 0))
        raise ValueError(f"{('item_a', 'item_b')[at % 2]}, row {at // 2}: a missing value (NA/NaN) is no item id")
    keys = uniques.tolist()
    names = [_item_id(k) for k in keys]
    merged = {nm: k for k, nm in enumerate(dict.fromkeys(names))}
    if len(merged) < len(keys):
        codes = np.array([merged[nm] for nm in names], np.int64)[codes]
        names = list(merged)
    return names, codes[0::2].astype(np.int64), codes[1::2].astype(np.int64)


def _numbering() -> collections.defaultdict:
    """An empty map item id -> its number as 4 little-endian bytes, in which an id looked up for the first time
    is numbered then (its ``default_factory``, called once per distinct id): numbers follow the order of first
    lookup. A ``defaultdict`` (C) is looked up as fast as a ``dict``; a Python subclass of ``dict`` with
    ``__missing__`` took twice as long (2.1 against 1.1 ms over 99,040 ids)."""
    numbering = collections.defaultdict()
    numbering.default_factory = lambda: len(numbering).to_bytes(4, "little")
    return numbering


def _item_codes(a: list, b: list):
    """Item ids of the A and B columns -> ``(names, ia, ib)``: items numbered in order of first appearance,
    row by row and A before B (as :func:`read_comparisons` numbers them), ids as :func:`_item_id` writes
    them; no per-row Python.

    One dictionary pass in C over the interleaved columns numbers and looks up every row at once
    (``operator.itemgetter`` over :func:`_numbering`, whose factory runs once per distinct id), and its
    4-byte codes are joined into one buffer read by NumPy without a Python integer per row. On all 49,520
    football rows: 2.1 ms (interleaving 0.25, lookups 1.26, join and ``np.frombuffer`` 0.6) against 4.7 ms
    for ``dict.fromkeys``, a second lookup pass and ``np.fromiter`` (min of 40, load 8-11; issue 33).
    """
    both = [None] * (2 * len(a))
    both[0::2], both[1::2] = a, b
    numbering = _numbering()
    try:
        # two or more keys: itemgetter returns a tuple
        codes = np.frombuffer(b"".join(operator.itemgetter(*both)(numbering)), "<i4").astype(np.int64)
    except TypeError as e:                  # an unhashable id (a list, a dict)
        raise ValueError(f"item_a and item_b must hold strings or numbers as item ids ({e})") from None
    keys = list(numbering)
    if all(type(k) is str for k in keys):   # text ids (the usual case): no per-id Python call
        names = [k.strip() for k in keys]
        if "" not in names and len(set(names)) == len(names):
            return names, codes[0::2], codes[1::2]
    elif len(set(map(type, both)) - {str}) > 1:
        # ids of several types: a dictionary is one key for 1, 1.0 and True (equal, one hash), which are the
        # items "1", "1.0" and no id at all; numbered again by (type, id), a row at a time (numeric ids only)
        both = [x if type(x) is str else (type(x), x) for x in both]
        numbering = _numbering()
        codes = np.frombuffer(b"".join(operator.itemgetter(*both)(numbering)), "<i4").astype(np.int64)
        keys = [k if type(k) is str else k[1] for k in numbering]
        both = [x if type(x) is str else x[1] for x in both]
    names, merged = [], {}
    for k in keys:                          # once per distinct id, not per row
        try:
            if _blank(k):
                raise ValueError(f"{k!r} is empty or NaN, not an item id")
            name = _item_id(k)
        except ValueError as e:
            at = next(n for n, x in enumerate(both) if x is k or (type(x) is type(k) and x == k))   # not 1 for True
            raise ValueError(f"{('item_a', 'item_b')[at % 2]}, row {at // 2}: {e}") from None
        merged.setdefault(name, len(merged))
        names.append(name)
    if len(merged) < len(keys):             # " x" and "x", or 1 and "1": one item
        remap = np.array([merged[nm] for nm in names], np.int64)
        codes = remap[codes]
        names = list(merged)
    return names, codes[0::2], codes[1::2]


def comparisons_from_rows(item_a, item_b, p, *, weight=None, aggregate: bool | str = True):
    """One context's comparisons from columns of raw rows (evalica's input form), vectorised.

    Row ``k`` compares ``item_a[k]`` (position A) with ``item_b[k]`` and says
    ``p[k] = P(A better)`` (1, 0, 0.5 for a win, a loss, a tie; any value in
    ``[0, 1]``) with weight ``weight[k]`` (default 1). Items are numbered in order of
    first appearance with the ids of :func:`read_comparisons` (``" x"`` is ``"x"``,
    ``1`` is ``"1"``, ``1.0`` is ``"1.0"``, another item; a boolean is no id), by one dictionary pass over
    the rows (:func:`_item_codes`); no per-row Python runs (but for ids of several types, e.g. ints and floats).

    With ``aggregate=True`` (default) rows of the same ordered pair ``(a, b)`` become
    one comparison (``np.bincount``) with the summed weight ``W = sum_k w_k`` and the
    weighted mean ``P = sum_k w_k p_k / W``: the Bradley-Terry log-likelihood
    ``sum_k w_k [p_k log sigmoid(d) + (1 - p_k) log sigmoid(-d)]`` (PoE eq. 3,
    ``../shared/METHODS.md``) equals ``W [P log sigmoid(d) + (1 - P) log sigmoid(-d)]``,
    so :func:`jaxrank.fit_poe_bradley_terry` with ``eps=0`` (the maximum-likelihood BT of
    evalica and choix, ties half a win), with or without a position bias, gives the
    same scores on far fewer comparisons. Scorers not linear in ``(w, w p)`` per
    comparison differ: hard decisions ``1[p > 0.5]`` (``bradley_terry``, ``win_ratio``),
    a clipping ``eps > 0`` or the Gaussian expert's logits; pass ``aggregate=False``
    for them (one comparison a row). Pairs whose rows all have weight 0 are dropped.

    With ``aggregate="unordered"`` the rows of ``(a, b)`` and of ``(b, a)`` become one
    comparison too: a row of ``(b, a)`` with ``p`` is a row of ``(a, b)`` with ``1 - p``
    (``log sigmoid(-d)`` and ``log sigmoid(d)`` swap), so the comparison of the pair, ``a``
    the item numbered first, has ``W = sum_k w_k`` over both orders and ``P = sum_k w_k p'_k / W``
    with ``p'_k = p_k`` or ``1 - p_k``. Exact for the same likelihood **without a position
    bias** only (``debias=False``, as evalica and choix fit it): a learnt or mean bias
    ``gamma`` enters ``d = s_a - s_b - gamma`` with the sign of the order, which the sum
    forgets. On the 49,520 football rows: 7,557 comparisons against 12,309 ordered pairs.

    Args:
        item_a: ``[R]`` ids (strings or numbers) of the items in position A
            (list, NumPy array or pandas Series).
        item_b: ``[R]`` ids of the items in position B.
        p: ``[R]`` probabilities that A is better, in ``[0, 1]``.
        weight: optional ``[R]`` non-negative finite weights.
        aggregate: ``True`` or ``"ordered"``: sum rows of one ordered pair into one
            comparison; ``"unordered"``: of one pair in either order (no position bias
            only); ``False``: one comparison a row (see above).

    Returns:
        ``(comparisons, items)``: a single-context :class:`~jaxrank.Comparisons`
        over ``N = len(items)`` items and the item names (index ``n`` is ``items[n]``).

    Raises:
        ValueError: naming the argument and row of the first bad value (lengths
            that differ, an empty or unhashable id, an item compared with itself, ``p``
            outside ``[0, 1]`` or not finite, a negative or non-finite weight (or a positive one
            that float32 cannot hold, under about 1.2e-38 or over 3.4e38), no
            row of positive weight, or an unknown ``aggregate``).
    """
    if isinstance(aggregate, str) and aggregate not in ("ordered", "unordered"):
        raise ValueError(f"aggregate must be True, False, 'ordered' or 'unordered', got {aggregate!r}")
    unordered = aggregate == "unordered" if isinstance(aggregate, str) else (False if aggregate else None)
    a, b = (x if _pandas_codes(x) else _column(k, x) for k, x in (("item_a", item_a), ("item_b", item_b)))
    pp = _floats("p", p)
    if pp.ndim != 1 or not len(a) == len(b) == len(pp):
        raise ValueError(f"item_a, item_b and p must be 1-D of one length; got {len(a)}, {len(b)} and "
                         f"shape {pp.shape}")
    if not len(a):
        raise ValueError("item_a is empty: no comparisons")
    ok = (pp >= 0) & (pp <= 1)                    # False for NaN too
    if not ok.all():
        k = int(np.argmin(ok))
        raise ValueError(f"p, row {k}: {pp[k]!r} is not a probability in [0, 1]")
    w = None if weight is None else _floats("weight", weight)
    if w is not None:
        if w.shape != pp.shape:
            raise ValueError(f"weight must have shape {pp.shape}, got {w.shape}")
        f32 = np.finfo(np.float32)
        bad = ~np.isfinite(w) | (w < 0) | (w > float(f32.max)) | ((w > 0) & (w < float(f32.tiny)))
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(f"weight, row {k}: {float(w[k])!r} is not a finite non-negative float32 weight (a positive "
                             f"one lies in [{f32.tiny:.3g}, {f32.max:.3g}]: a smaller one would be 0); rescale the "
                             "weights")
        if not (w > 0).any():
            raise ValueError("weight: every row has weight 0: nothing to rank")
    # two typed Series of one dtype (an int and a float Series would be joined as floats: 1 read as "1.0")
    names, ia, ib = _series_codes(a, b) if _pandas_codes(a) and _pandas_codes(b) and a.dtype == b.dtype else \
        _item_codes(_column("item_a", a), _column("item_b", b))
    same = ia == ib if w is None else (ia == ib) & (w > 0)
    if same.any():
        k = int(np.argmax(same))
        raise ValueError(f"item_a and item_b, row {k}: item {names[ia[k]]!r} is compared with itself")
    n = len(names)

    from jaxrank.comparisons import Comparisons  # deliberately lazy: the rows are checked before JAX loads

    if unordered is None:
        return Comparisons.from_pairs(ia.astype(np.int32), ib.astype(np.int32), pp.astype(np.float32),
                                      num_items=n, weight=None if w is None else w.astype(np.float32)), names
    if unordered:                                 # (b, a) with p is (a, b) with 1 - p, a numbered first
        lo = np.minimum(ia, ib)
        ia, ib, pp = lo, ia + ib - lo, np.abs((lo != ia) - pp)      # |1 - p| where swapped, else |0 - p|
    flat = ia * n + ib
    wpp = pp if w is None else w * pp
    if n * n <= max(8 * len(flat), 1 << 16):      # a dense count table is cheaper than sorting the rows
        ws = np.bincount(flat, w, n * n)
        wp = np.bincount(flat, wpp, n * n)
        pair = np.flatnonzero(ws)
        ws, wp = ws[pair], wp[pair]
    else:
        pair, inv = np.unique(flat, return_inverse=True)
        ws, wp = np.bincount(inv, w), np.bincount(inv, wpp)
        live = ws > 0
        pair, ws, wp = pair[live], ws[live], wp[live]
    prob = np.clip(wp / ws, 0.0, 1.0)
    return Comparisons.from_pairs((pair // n).astype(np.int32), (pair % n).astype(np.int32),
                                  prob.astype(np.float32), num_items=n, weight=ws.astype(np.float32)), names
