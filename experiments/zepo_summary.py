"""One table and one plot across every stored ZEPO / soft-prompt run (issue 12, "The study").

Reads what ``zepo.py`` and ``soft_prompt.py`` already wrote under ``experiments/results/`` (no
model, no judging; seconds) and writes ``results/zepo_summary.{md,png}``:

1. held-out table: per run (data set, aspect, judge, paraphraser), seed vs ZEPO prompt (and the
   stored soft-prompt rows), each scorer raw and permutation-debiased: fairness, P(A), mean
   Spearman per held-out context with its bootstrap 95% interval, contexts, and the paired
   ZEPO - seed difference with its interval (zepo-fairer-preferences Figure 5 question);
2. the Figure 2/3 question pooled over runs: the Spearman correlation across candidate prompts
   between fairness (eq. ZEPO-2, ``-|P(A) - 1/2|``) and the prompt's mean Spearman with the humans
   on the search contexts, per run and pooled; pooled both raw and with each group's means removed
   (aspects differ in how well any prompt agrees with the humans), with a bootstrap 95% interval
   that resamples prompts within each group.

    python experiments/zepo_summary.py
    python experiments/zepo_summary.py --results experiments/results --bootstrap 2000
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
from pathlib import Path

import numpy as np
from scipy import stats

RESULTS = Path(__file__).resolve().parent / "results"
_HEADER = re.compile(r"^# ZEPO study: (\S+) (\S+), judge (\S+), paraphraser (\S+)")
_SEARCH = re.compile(r"^search: (\d+) contexts x (\d+) candidates")
_HELD = re.compile(r"^## Seed vs ZEPO prompt on (\d+) held-out contexts \((\d+) comparisons")
_DIFF = re.compile(r"^- ZEPO - seed \((\w+), (\w+)\): (\S+) \[(\S+), (\S+)\] \(paired over the (\d+) contexts")
_TIME = re.compile(r"^time: search (\d+) s \((\d+) comparisons judged this run\).*total (\d+) s")
_EVAL = re.compile(r"held-out contexts (\S+)$")


def parse_zepo_md(path: Path) -> dict:
    """The run description, held-out rows and paired differences from one ``zepo-*.md`` report.

    Raises:
        ValueError: ``path`` is not a ZEPO study report (names the file and what is missing).
    """
    run = {"file": str(path), "rows": [], "diffs": {}}
    for line in path.read_text().splitlines():
        if m := _HEADER.match(line):
            run.update(data=m[1], aspect=m[2], judge=m[3], paraphraser=m[4])
        elif m := _SEARCH.match(line):
            run.update(search_contexts=int(m[1]), candidates=int(m[2]))
            run["eval_range"] = (_EVAL.search(line) or [None, "?"])[1]
        elif m := _HELD.match(line):
            run.update(eval_contexts=int(m[1]), eval_comparisons=int(m[2]))
        elif line.startswith("| seed |") or line.startswith("| ZEPO |"):
            c = [x.strip() for x in line.strip("|").split("|")]
            lo, hi = (float(x) for x in c[6].strip("[]").split(","))
            run["rows"].append({"prompt": c[0], "scorer": c[1], "debias": c[2], "fairness": float(c[3]),
                                "P(A)": float(c[4]), "spearman": float(c[5]), "ci": (lo, hi),
                                "defined": c[7]})
        elif m := _DIFF.match(line):
            run["diffs"][(m[1], m[2])] = (float(m[3]), float(m[4]), float(m[5]), int(m[6]))
        elif m := _TIME.match(line):
            run.update(time_s=int(m[3]), judged_this_run=int(m[2]))
    missing = [k for k in ("data", "judge", "eval_contexts") if k not in run] + ([] if run["rows"] else ["rows"])
    if missing:
        raise ValueError(f"{path}: not a ZEPO study report (missing {', '.join(missing)})")
    return run


def read_prompts_csv(path: Path) -> list[dict]:
    """Candidate prompts of one run: epoch, template key, fairness, P(A), Spearman (floats; NaN kept)."""
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        for k in ("decision_rate", "fairness", "spearman"):
            r[k] = float(r[k])
    return rows


def _spearman_text(row: dict) -> str:
    """``mean [lo, hi]``, or why it is undefined (never a bare NaN)."""
    if not np.isfinite(row["spearman"]):
        return "undefined: constant scores in every context"
    return f"{row['spearman']:+.3f} [{row['ci'][0]:+.3f}, {row['ci'][1]:+.3f}]"


def soft_rows(path: Path) -> list[dict]:
    """Held-out rows of a ``soft_prompt.py`` JSON summary (the merged one lists seed, soft and ZEPO)."""
    d = json.loads(path.read_text())
    out = []
    for r in d["rows"]:
        for scorer, key, ci in (("average_probability", "spearman avg-prob", "ci avg-prob"),
                                ("win_ratio", "spearman win ratio", "ci win ratio")):
            out.append({"prompt": r["variant"], "scorer": scorer, "debias": r["debias"],
                        "fairness": r["fairness"], "P(A)": r["P(A)"], "spearman": r[key],
                        "ci": tuple(r[ci]), "comparisons": r["comparisons"]})
    return out


def pooled_corr(groups: dict, rng, reps: int, centre: bool):
    """Spearman of fairness vs Spearman-with-humans over all prompts of ``groups`` and a 95% interval.

    ``groups`` maps a group name to ``(fairness[n], spearman[n])``; with ``centre`` each group's means
    are subtracted first and groups of one prompt are left out. The interval resamples prompts with
    replacement within each group. Returns ``(r, lo, hi, p, n)`` with ``n`` the prompts used.
    """
    def corr(parts):
        x = np.concatenate([f - f.mean() if centre else f for f, _ in parts])
        y = np.concatenate([s - s.mean() if centre else s for _, s in parts])
        return stats.spearmanr(x, y)[0] if np.ptp(x) > 0 and np.ptp(y) > 0 else np.nan

    parts = [(np.asarray(f, float), np.asarray(s, float)) for f, s in groups.values()]
    if centre:      # a one-prompt group centres to the point (0, 0): it carries no within-group information
        parts = [(f, s) for f, s in parts if len(f) >= 2]
    if not parts:
        return np.nan, np.nan, np.nan, np.nan, 0
    r = corr(parts)
    n = sum(len(f) for f, _ in parts)
    x = np.concatenate([f - f.mean() if centre else f for f, _ in parts])
    y = np.concatenate([s - s.mean() if centre else s for _, s in parts])
    p = stats.spearmanr(x, y)[1] if np.ptp(x) > 0 and np.ptp(y) > 0 else np.nan
    bs = []
    for _ in range(reps):
        res = []
        for f, s in parts:
            k = rng.integers(0, len(f), len(f))
            res.append((f[k], s[k]))
        bs.append(corr(res))
    bs = np.asarray(bs)
    bs = bs[np.isfinite(bs)]
    lo, hi = np.percentile(bs, [2.5, 97.5]) if len(bs) else (np.nan, np.nan)
    return r, lo, hi, p, n


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=str(RESULTS), help="folder searched (recursively) for zepo-*.md")
    ap.add_argument("--soft", default=str(RESULTS / "merged" / "soft_prompt_summeval_coherence_smollm2-135m.json"),
                    help="soft_prompt.py JSON summary to add ('' for none)")
    ap.add_argument("--bootstrap", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="output stem (default RESULTS/zepo_summary)")
    args = ap.parse_args(argv)
    root = Path(args.results)
    if not root.is_dir():
        raise ValueError(f"--results: {root} is not a folder")
    stem = Path(args.out) if args.out else root / "zepo_summary"
    rng = np.random.default_rng(args.seed)
    runs = [parse_zepo_md(p) for p in sorted(root.rglob("zepo-*.md"))]
    if not runs:
        raise ValueError(f"--results: no zepo-*.md report under {root}")

    lines = ["# Fairer prompts (issue 12): every stored ZEPO / soft-prompt run", "",
             "Held-out contexts never seen by the search. Spearman: mean over held-out contexts of the "
             "per-context Spearman of the judge's scores with the human scores, bootstrap 95% interval over "
             "contexts. fairness = -|P(A) - 1/2| of the prompt on the held-out pairs (raw judge; permutation "
             "debiasing makes it 0). average_probability with both orders judged already averages the orders, "
             "so its permutation row equals the raw one. 'defined': contexts where the "
             "Spearman exists (a judge that always answers A gives constant win ratios). time: wall time of the "
             "report's last run; a resumed run re-uses the judgements already stored, so it can be far below the "
             "first run's.", "",
             "| data | aspect | judge | paraphraser | search ctx x cand | held-out ctx | prompt | scorer | debias "
             "| fairness | P(A) | Spearman [95% CI] | defined | ZEPO - seed [95% CI] | time of the last run (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        for row in r["rows"]:
            d = r["diffs"].get((row["scorer"], row["debias"])) if row["prompt"] == "ZEPO" else None
            dtxt = "" if d is None else (f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}] (n={d[3]})" if d[3] else
                                         "undefined (no context defined for both)")
            lines.append(f"| {r['data']} | {r['aspect']} | {r['judge']} | {r['paraphraser']} | "
                         f"{r.get('search_contexts', '?')} x {r.get('candidates', '?')} | {r['eval_range']} "
                         f"({r['eval_contexts']}) | {row['prompt']} | {row['scorer']} | {row['debias']} | "
                         f"{row['fairness']:+.3f} | {row['P(A)']:.2f} | {_spearman_text(row)} | "
                         f"{row['defined']} | {dtxt} | "
                         f"{r.get('time_s', '?')} |")
    if args.soft:
        sp = Path(args.soft)
        if not sp.is_file():
            raise ValueError(f"--soft: {sp} does not exist")
        lines += ["", f"Soft prompt (soft_prompt.py, `{sp.relative_to(root) if sp.is_relative_to(root) else sp}`): "
                  "SummEval coherence, judge smollm2-135m, held-out contexts 80:86 (other contexts than the ZEPO "
                  "rows above; the ZEPO template there is the coherence run's), 24 pairs each in both orders.", "",
                  "| prompt | scorer | debias | comparisons | fairness | P(A) | Spearman [95% CI] |",
                  "|---|---|---|---|---|---|---|"]
        for row in soft_rows(sp):
            if row["scorer"] == "average_probability" and row["debias"] == "permutation":
                continue
            lines.append(f"| {row['prompt']} | {row['scorer']} | {row['debias']} | {row['comparisons']} | "
                         f"{row['fairness']:+.3f} | {row['P(A)']:.2f} | {row['spearman']:+.3f} "
                         f"[{row['ci'][0]:+.3f}, {row['ci'][1]:+.3f}] |")

    # ---- Figure 2/3, per run and pooled
    groups, seen = {}, set()
    for r in runs:
        csv_path = Path(r["file"]).with_name(Path(r["file"]).stem + "-prompts.csv")
        if not csv_path.is_file():
            continue
        name = f"{r['data']} {r['aspect']} / {r['judge']}"
        for p in read_prompts_csv(csv_path):
            # a prompt scored by two runs on the same sample (same judge, same contexts) counts once
            key = (name, r.get("search_contexts"), r.get("candidates"), p["template_key"])
            if key in seen or not (np.isfinite(p["fairness"]) and np.isfinite(p["spearman"])):
                continue
            seen.add(key)
            f, s = groups.setdefault(name, ([], []))
            f.append(p["fairness"])
            s.append(p["spearman"])
    lines += ["", "## Fairness vs agreement with humans across candidate prompts (Figure 2/3 question)", "",
              "Each point is one candidate prompt of a search, on that search's sample contexts (both orders). "
              "Spearman correlation across prompts of fairness with the prompt's mean Spearman with the humans; "
              "bootstrap 95% interval resampling prompts within each group.", "",
              "| prompts of | n | Spearman corr. | 95% CI | p |", "|---|---|---|---|---|"]
    corr_rows = []
    for name, (f, s) in groups.items():
        r, lo, hi, p, n = pooled_corr({name: (f, s)}, rng, args.bootstrap, centre=False)
        corr_rows.append((name, n, r, lo, hi, p))
    smol_se = {k: v for k, v in groups.items() if k.startswith("summeval") and k.endswith("smollm2-135m")}
    for label, sel, centre in (("SummEval, 4 aspects, smollm2-135m, pooled", smol_se, False),
                               ("same, each aspect's means removed", smol_se, True),
                               ("every run pooled, each group's means removed", groups, True)):
        if sel:
            r, lo, hi, p, n = pooled_corr(sel, rng, args.bootstrap, centre=centre)
            corr_rows.append((label, n, r, lo, hi, p))
    for name, n, r, lo, hi, p in corr_rows:
        txt = "undefined (constant fairness or Spearman, or n < 3)" if not np.isfinite(r) or n < 3 else \
            f"{r:+.2f} | [{lo:+.2f}, {hi:+.2f}] | {p:.2g}"
        lines.append(f"| {name} | {n} | {txt} |" if "undefined" not in txt else f"| {name} | {n} | {txt} | | |")
    lines += ["", f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}"]
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 5))
    markers = "osD^v<>P*X"
    for k, (name, (f, s)) in enumerate(groups.items()):
        ax.scatter(f, s, marker=markers[k % len(markers)], label=f"{name} (n={len(f)})", alpha=0.8)
    pooled = [c for c in corr_rows if c[0].endswith("pooled")]
    title = "fairness vs human agreement per candidate prompt"
    if pooled and np.isfinite(pooled[0][2]):
        title += f"\nSummEval SmolLM2 pooled: Spearman {pooled[0][2]:+.2f} [{pooled[0][3]:+.2f}, {pooled[0][4]:+.2f}]"
    ax.set_title(title)
    ax.set_xlabel("fairness -|P(A) - 1/2| on the search sample (higher = fairer)")
    ax.set_ylabel("mean Spearman with humans (search contexts)")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{stem}.png", dpi=110)
    print(f"wrote {stem}.md, {stem}.png ({len(runs)} ZEPO runs)")


if __name__ == "__main__":
    main()
