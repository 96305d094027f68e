"""The written parts of ``efficiency_real.py``'s results: the paper's figures it quotes, the ``sim-flant5``
judge's calibration, and the section ``reproduction.py`` regenerates from a written CSV alone (no JAX).

Loaded beside ``efficiency_real.py`` (``sys.path`` holds this folder); its names are re-exported there.
"""

from __future__ import annotations

import csv
from pathlib import Path

FLANT5 = {
    # (data, aspect): (accuracy, P(A), where, item noise): LCA's FlanT5-3B there. Accuracy: Table 10 (raw);
    # P(A): prompt 1 of Table 5 / 9. On TopicalChat's labels item noise 1.5 caps accuracy near 0.72: 1.0.
    ("summeval", "coherence"): (0.686, 0.37, "LCA FlanT5-3B, SummEval COH: accuracy 0.686 (Tables 7, 10), "
                                             "P(A) 0.37 (Table 5, prompt 1)", 1.5),
    ("topicalchat", "coherence"): (0.753, 0.47, "LCA FlanT5-3B, TopicalChat COH: accuracy 0.753 (Table 10), "
                                                "P(A) 0.47 (Table 9, prompt 1; 0.46 prompt 2); item noise 1.0, "
                                                "as 1.5 cannot reach 0.753 on these labels", 1.0),
}
"""The ``sim-flant5`` judge's calibration per data set and aspect, from the LCA paper's FlanT5-3B figures."""

PROTOCOL = ("Our curves use non-symmetric random selection (each comparison one ordered pair, a random spanning "
            "tree first, then uniform; PoE §4.2 only requires every text to be compared at least once); the "
            "paper's tables use its symmetric set-up (both orders of each selected pair, PoE §4: 'used unless "
            "stated otherwise')")
"""The protocol difference between these curves and PoE Tables 1, 2, 7, 8."""

PAPER_POINT = {"summeval": 0.2, "topicalchat": 0.6}
"""The share of ``N(N-1)`` at which :data:`PAPER` quotes the paper (R = 48 of 240; R = 18 of 30)."""

PAPER = {
    "topicalchat": "PoE Tables 7-8 (TopicalChat, N = 6, mean of the four aspects), FlanT5-3B at R = 18: win ratio "
                   "41.3, BT 41.8, avg prob 43.4, PoE-BT 45.4, PoE-g 45.2; R = 30: 44.7-45.3; Mistral-7B R = 18: "
                   "42.8 / 43.3 / 42.8 / 45.3 / 44.8, R = 30: 46.9-47.7",
    "summeval": "PoE Table 1 (SummEval, N = 16, mean of the four aspects), FlanT5-3B at R = 48: win ratio 34.1, "
                "BT 36.6, avg prob 38.4, PoE-BT 42.6, PoE-g 42.4; R = 240: 43.6-44.3; Table 2 greedy vs random at "
                "R = 48: +1.9 win ratio, +0.9 avg prob, +0.5 PoE-BT, +0.5 PoE-g",
}



def reproduction_section(csv_path, *, title: str | None = None) -> list[str]:
    """Markdown lines regenerated from a written ``efficiency_<data>_<judge>.csv`` alone (no JAX; milliseconds).

    For ``experiments/reproduction.py``: the real judge's Spearman x 100 at 25%, 50%, 100% of the ``N(N-1)``
    comparisons and at the paper's operating point (:data:`PAPER_POINT`), those the CSV has, per scorer (random
    selection) beside the two simulated judges, and greedy / active minus random at every budget.
    """
    with open(csv_path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    curve = [r for r in rows if not r.get("versus")]
    diff = [r for r in rows if r.get("versus") and r["judge_kind"] == "real"]
    full = max(int(r["budget"]) for r in curve)
    have, point = {int(r["budget"]) for r in curve}, PAPER_POINT.get(curve[0]["data"])
    cols = sorted({round(x * full) for x in (0.25, 0.5, 1.0) + ((point,) if point else ())} & have)
    cell = lambda kind, sel, s, b: next((f"{100 * float(r['mean']):.1f} [{100 * float(r['ci_lo']):.1f}, "
                                         f"{100 * float(r['ci_hi']):.1f}]" for r in curve
                                         if r["judge_kind"] == kind and r["selection"] == sel and r["scorer"] == s
                                         and int(r["budget"]) == b), "")
    data, aspect = curve[0]["data"], curve[0].get("aspect", "coherence")
    out = [f"### {title or 'Real judge efficiency: ' + data}", "",
           f"Spearman x 100 (mean over selections of the mean per-context Spearman) [95% bootstrap over contexts], "
           f"random selection, at R = {', '.join(map(str, cols))} of {full}; from `{Path(csv_path).name}`. "
           "Judges: `real` the stored judgements; `sim-matched` simulated at the real judge's pooled accuracy and "
           "P(A); `sim-flant5` simulated at " + flant5_words(curve, data, aspect) + f". {PROTOCOL}.", "",
           "| judge | scorer | " + " | ".join(f"R = {b}" for b in cols) + " |", "|---|---|" + "---:|" * len(cols)]
    for kind in dict.fromkeys(r["judge_kind"] for r in curve):
        for s in dict.fromkeys(r["scorer"] for r in curve if r["judge_kind"] == kind):
            out.append(f"| {kind} | {s} | " + " | ".join(cell(kind, "random", s, b) for b in cols) + " |")
    bs = sorted({int(r["budget"]) for r in diff})
    out += ["", "Real judge, selection minus random at every budget (Spearman points [95% over contexts]):", "",
            "| versus | scorer | " + " | ".join(f"R = {b}" for b in bs) + " |", "|---|---|" + "---:|" * len(bs)]
    for vs in dict.fromkeys(r["versus"] for r in diff):
        for s in ("win_ratio", "average_probability", "poe_gaussian", "poe_bradley_terry"):
            cells = [next((f"{100 * float(r['diff']):+.1f} [{100 * float(r['ci_lo']):+.1f}, "
                           f"{100 * float(r['ci_hi']):+.1f}]" for r in diff if r["versus"] == vs and r["scorer"] == s
                           and int(r["budget"]) == b), "") for b in bs]
            out.append(f"| {vs} | {s} | " + " | ".join(cells) + " |")
    out += agreement_table(curve, full)
    slice_ = sorted({int(r["contexts"]) for r in curve if r["judge_kind"] == "real" and r.get("contexts")})
    out += ["", f"Paper: {PAPER.get(data, '(no paper row for this data set)')}. Ours: one aspect, a small local "
            f"judge, {slice_[-1] if slice_ else '?'} contexts (the 95% intervals above are over them)."]
    return out + [""]


def flant5_words(curve, data: str, aspect: str) -> str:
    """What the CSV's ``sim-flant5`` judge was calibrated to: its stored accuracy and P(A) with the paper's source
    (:data:`FLANT5`), or, for a CSV written before those columns, SummEval's figures (then hard-coded)."""
    sim = next((r for r in curve if r["judge_kind"] == "sim-flant5"), None)
    if sim is None:
        return "nothing (no such judge in this CSV)"
    if not sim.get("judge_accuracy"):
        return ("SummEval coherence's FlanT5-3B figures (accuracy 0.686, P(A) 0.37, LCA Tables 5, 7), whatever the "
                "data set: a CSV written before the per-data-set calibration")
    acc, pa = float(sim["judge_accuracy"]), float(sim["judge_p_a"])
    ref = FLANT5.get((data, aspect))
    src = f" ({ref[2]})" if ref and abs(ref[0] - acc) < 1e-4 and abs(ref[1] - pa) < 1e-4 else ""
    return f"accuracy {acc:.3f}, P(A) {pa:.2f}{src}"


def agreement_table(curve, full) -> list[str]:
    """The real judge's Spearman, Kendall tau-b and Pearson x 100 at the full budget (random selection), per
    scorer, from CSV rows; no lines for a CSV written before the Kendall / Pearson columns existed."""
    rows = [r for r in curve if r["judge_kind"] == "real" and r["selection"] == "random" and int(r["budget"]) == full]
    if not rows or not rows[0].get("kendall_tau"):
        return []
    f = lambda r, m: (f"{100 * float(r[m or 'mean']):.1f} [{100 * float(r[(m + '_' if m else '') + 'ci_lo']):.1f}, "
                      f"{100 * float(r[(m + '_' if m else '') + 'ci_hi']):.1f}]")
    out = ["", f"Real judge at R = {full} (every comparison), random selection: the field's three agreements x 100 "
           "(mean over contexts of the per-context correlation [95% bootstrap over contexts]):", "",
           "| scorer | Spearman | Kendall tau-b | Pearson |", "|---|---:|---:|---:|"]
    return out + [f"| {r['scorer']} | {f(r, '')} | {f(r, 'kendall_tau')} | {f(r, 'pearson')} |" for r in rows]
