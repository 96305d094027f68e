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
   (aspects differ in how well any prompt agrees with the humans). The 95% interval is Fisher's z
   with the Bonett-Wright variance (the one the test's p agrees with); the bootstrap interval that
   resamples prompts within each group is shown beside it with the resamples it could not use (no
   spread in fairness or Spearman: undefined correlation), and a row says when it rests on few
   distinct values.

Each run's reading is shown: the answer prefix its report records and the label mass of the seed and
ZEPO prompts on the held-out contexts, read from the run's judgement store ("not recorded" for runs
from before the judge recorded them). Only study reports are read: ``zepo-*.md`` files whose first
line is the study's header (``*.notes.md`` and other notes are skipped and listed).

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

from jaxrank.assessment.zepo import CONTENT_FREE

RESULTS = Path(__file__).resolve().parent / "results"
_HEADER = re.compile(r"^# ZEPO study: (\S+) (\S+), judge (\S+), paraphraser (\S+)")
_SEARCH = re.compile(r"^search: (\d+) contexts x (\d+) candidates")
_HELD = re.compile(r"^## Seed vs ZEPO prompt on (\d+) held-out contexts \((\d+) comparisons")
_DIFF = re.compile(r"^- ZEPO - seed \((\w+), (\w+)\): (\S+) \[(\S+), (\S+)\] \(paired over the (\d+) contexts")
_TIME = re.compile(r"^time: search (\d+) s \((\d+) comparisons judged this run\).*total (\d+) s")
_EVAL = re.compile(r"held-out contexts (\S+)$")
_PREFIX = re.compile(r"^answer prefix: (.*)$")
NOT_RECORDED = "not recorded"
FEW_DISTINCT = 5            # fewer distinct values than this on either axis: the interval rests on few values


def is_study_report(path: Path) -> bool:
    """Whether ``path`` is a ``zepo.py`` study report: its first line is the study's header (a positive rule;
    notes such as ``*.notes.md`` written beside a run are not)."""
    with open(path, encoding="utf-8") as fh:
        first = fh.readline()
    return bool(_HEADER.match(first))


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
        elif m := _PREFIX.match(line):
            run["answer_prefix"] = m[1]
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
        if "answer_prefix" in r:
            m = r.get("label mass")
            reading = f"answer prefix {r['answer_prefix']!r}, label mass " + (
                NOT_RECORDED if m is None else f"{m[0]:.3f} (min {m[1]:.3f})")
        else:
            reading = f"{NOT_RECORDED} (old reading: no answer prefix, no label mass)"
        for scorer, key, ci in (("average_probability", "spearman avg-prob", "ci avg-prob"),
                                ("win_ratio", "spearman win ratio", "ci win ratio")):
            out.append({"prompt": r["variant"], "scorer": scorer, "debias": r["debias"],
                        "fairness": r["fairness"], "P(A)": r["P(A)"], "spearman": r[key],
                        "ci": tuple(r[ci]), "comparisons": r["comparisons"], "reading": reading})
    return out


def held_out_label_mass(report: Path) -> dict:
    """The label mass of the seed and ZEPO prompts on the held-out contexts of one run, from its store.

    The run's files beside its report: ``-prompts.csv`` (the seed is its epoch-0 row), the saved template
    ``.json`` (ZEPO's pick: the candidate whose instruction its text holds), ``-log.jsonl`` (the search
    sample's contexts, left out, as is the content-free probe ``[N/A]`` of the calibration objectives) and
    ``-store.jsonl``. Returns ``{"seed": (median, min, rows), "ZEPO": ...}``;
    a prompt whose rows carry no ``label_mass`` (a store from before the judge recorded it), or a run
    without those files, is left out.
    """
    stem = report.with_suffix("")
    files = {k: Path(f"{stem}{k}") for k in ("-prompts.csv", ".json", "-log.jsonl", "-store.jsonl")}
    if not all(f.is_file() for f in files.values()):
        return {}
    with open(files["-prompts.csv"], newline="") as fh:
        prompts = list(csv.DictReader(fh))
    text = json.loads(files[".json"].read_text()).get("text", "")
    picked = [r for r in prompts if r.get("instruction") and r["instruction"] in text]
    keys = {"seed": prompts[0]["template_key"] if prompts and prompts[0]["epoch"] == "0" else None,
            "ZEPO": max(picked, key=lambda r: len(r["instruction"]))["template_key"] if picked else None}
    search = set()
    for line in files["-log.jsonl"].read_text().splitlines():
        e = json.loads(line) if line.strip() else {}
        if e.get("event") == "config":
            search |= set(e.get("contexts", ()))
    mass: dict = {}
    for line in files["-store.jsonl"].read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            if r.get("context") not in search and r.get("context") != CONTENT_FREE and "label_mass" in r:
                mass.setdefault(r["template"], []).append(float(r["label_mass"]))
    return {name: (float(np.median(mass[k])), float(np.min(mass[k])), len(mass[k]))
            for name, k in keys.items() if k in mass}


def _reading_text(run: dict, prompt: str) -> tuple[str, str]:
    """The answer prefix and the held-out label mass cells of one row (``not recorded`` where absent)."""
    prefix = run.get("answer_prefix", NOT_RECORDED)
    m = run.get("label_mass", {}).get(prompt)
    return prefix, (NOT_RECORDED if m is None else f"{m[0]:.3f} (min {m[1]:.3f}, {m[2]} rows)")


def _centred(parts, centre):
    x = np.concatenate([f - f.mean() if centre else f for f, _ in parts])
    y = np.concatenate([s - s.mean() if centre else s for _, s in parts])
    return x, y


def _spread(x, y) -> bool:
    return len(x) >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0


def fisher_interval(r: float, n: int, controlled: int = 0) -> tuple[float, float]:
    """95% interval of a Spearman correlation: Fisher's z with the Bonett-Wright variance
    ``(1 + r^2 / 2) / (n - 3 - controlled)`` (``controlled``: group means removed beyond the overall one).
    NaN where it is undefined (``|r| = 1``, or too few points)."""
    dof = n - 3 - controlled
    if not np.isfinite(r) or abs(r) >= 1 or dof <= 0:
        return np.nan, np.nan
    z, se = np.arctanh(r), np.sqrt((1 + r * r / 2) / dof)
    q = stats.norm.ppf(0.975)
    return float(np.tanh(z - q * se)), float(np.tanh(z + q * se))


def corr_summary(groups: dict, rng, reps: int, centre: bool) -> dict:
    """Spearman of fairness vs Spearman-with-humans over all prompts of ``groups``, with its intervals.

    ``groups`` maps a group name to ``(fairness[n], spearman[n])``; with ``centre`` each group's means
    are subtracted first and groups of one prompt are left out. Returns a dict: ``r``, ``p`` (SciPy's
    test), ``n`` (prompts used), ``ci`` (:func:`fisher_interval`, one degree of freedom less per group
    centred beyond the first), ``boot`` (percentile interval of the resamples with a defined correlation,
    prompts resampled with replacement within each group), ``undefined`` (resamples with no spread in
    fairness or Spearman, left out of ``boot``), ``reps``, ``distinct`` (distinct fairness and Spearman
    values) and ``modal`` (prompts sharing the most common fairness value, and that value; raw values).
    """
    parts = [(np.asarray(f, float), np.asarray(s, float)) for f, s in groups.values()]
    if centre:      # a one-prompt group centres to the point (0, 0): it carries no within-group information
        parts = [(f, s) for f, s in parts if len(f) >= 2]
    out = dict(r=np.nan, p=np.nan, n=0, ci=(np.nan, np.nan), boot=(np.nan, np.nan), undefined=0, reps=reps,
               distinct=(0, 0), modal=(0, np.nan))
    if not parts:
        return out
    x, y = _centred(parts, centre)
    raw_f = np.concatenate([f for f, _ in parts])
    vals, counts = np.unique(raw_f, return_counts=True)
    out.update(n=len(x), distinct=(len(np.unique(x)), len(np.unique(y))),
               modal=(int(counts.max()), float(vals[counts.argmax()])))
    if not _spread(x, y):
        return out
    out["r"], out["p"] = (float(v) for v in stats.spearmanr(x, y))
    out["ci"] = fisher_interval(out["r"], len(x), controlled=len(parts) - 1 if centre else 0)
    bs = np.full(reps, np.nan)
    for b in range(reps):
        res = []
        for f, s in parts:
            k = rng.integers(0, len(f), len(f))
            res.append((f[k], s[k]))
        bx, by = _centred(res, centre)
        if _spread(bx, by):
            bs[b] = stats.spearmanr(bx, by)[0]
    ok = bs[np.isfinite(bs)]
    out["undefined"] = int(reps - len(ok))
    if len(ok):
        out["boot"] = tuple(float(v) for v in np.percentile(ok, [2.5, 97.5]))
    return out


def pooled_corr(groups: dict, rng, reps: int, centre: bool):
    """:func:`corr_summary` as ``(r, lo, hi, p, n)``, the interval Fisher's (:func:`fisher_interval`)."""
    c = corr_summary(groups, rng, reps, centre)
    return c["r"], c["ci"][0], c["ci"][1], c["p"], c["n"]


def corr_cells(name: str, c: dict) -> str:
    """One table row of :func:`corr_summary`: the intervals, the undefined resamples and the ties named."""
    if not np.isfinite(c["r"]):
        return f"| {name} | {c['n']} | undefined (constant fairness or Spearman, or n < 3) | | | | |"
    fisher = ("undefined (|r| = 1 or too few prompts)" if not np.isfinite(c["ci"][0]) else
              f"[{c['ci'][0]:+.2f}, {c['ci'][1]:+.2f}]")
    boot = ("no resample defined" if not np.isfinite(c["boot"][0]) else
            f"[{c['boot'][0]:+.2f}, {c['boot'][1]:+.2f}]") + f" ({c['undefined']} of {c['reps']} undefined)"
    few = min(c["distinct"]) < FEW_DISTINCT or 2 * c["modal"][0] > c["n"]
    ties = (f"{c['distinct'][0]} / {c['distinct'][1]}; {c['modal'][0]} of {c['n']} prompts share fairness "
            f"{c['modal'][1]:+.3f}" + ("; rests on few distinct values" if few else ""))
    return f"| {name} | {c['n']} | {c['r']:+.2f} | {fisher} | {boot} | {c['p']:.2g} | {ties} |"


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
    found = sorted(root.rglob("zepo-*.md"))
    skipped = [p for p in found if not is_study_report(p)]
    runs = [parse_zepo_md(p) for p in found if p not in skipped]
    if not runs:
        raise ValueError(f"--results: no zepo-*.md study report under {root}")
    for r in runs:
        r["label_mass"] = held_out_label_mass(Path(r["file"]))

    lines = ["# Fairer prompts (issue 12): every stored ZEPO / soft-prompt run", "",
             "Held-out contexts never seen by the search. Spearman: mean over held-out contexts of the "
             "per-context Spearman of the judge's scores with the human scores, bootstrap 95% interval over "
             "contexts. fairness = -|P(A) - 1/2| of the prompt on the held-out pairs (raw judge; permutation "
             "debiasing makes it 0). average_probability with both orders judged already averages the orders, "
             "so its permutation row equals the raw one. 'defined': contexts where the "
             "Spearman exists (a judge that always answers A gives constant win ratios). time: wall time of the "
             "report's last run; a resumed run re-uses the judgements already stored, so it can be far below the "
             "first run's. answer prefix: the one the run's report records (how the judge read its answer; "
             f"'{NOT_RECORDED}': a run from before it was recorded, read at the answer position with no prefix "
             "and no check). label mass: the share of the model's answer the two labels hold, median (min) over "
             "the prompt's held-out judgements in the run's store (a p read where the labels hold little of the "
             "answer compares answers the model hardly gives).", "",
             "| data | aspect | judge | paraphraser | search ctx x cand | held-out ctx | answer prefix | prompt "
             "| label mass (held-out) | scorer | debias | fairness | P(A) | Spearman [95% CI] | defined "
             "| ZEPO - seed [95% CI] | time of the last run (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        for row in r["rows"]:
            d = r["diffs"].get((row["scorer"], row["debias"])) if row["prompt"] == "ZEPO" else None
            dtxt = "" if d is None else (f"{d[0]:+.3f} [{d[1]:+.3f}, {d[2]:+.3f}] (n={d[3]})" if d[3] else
                                         "undefined (no context defined for both)")
            prefix, mass = _reading_text(r, row["prompt"])
            lines.append(f"| {r['data']} | {r['aspect']} | {r['judge']} | {r['paraphraser']} | "
                         f"{r.get('search_contexts', '?')} x {r.get('candidates', '?')} | {r['eval_range']} "
                         f"({r['eval_contexts']}) | {prefix} | {row['prompt']} | {mass} | {row['scorer']} | "
                         f"{row['debias']} | "
                         f"{row['fairness']:+.3f} | {row['P(A)']:.2f} | {_spearman_text(row)} | "
                         f"{row['defined']} | {dtxt} | "
                         f"{r.get('time_s', '?')} |")
    if skipped:
        lines += ["", "Not study reports (no study header on their first line), left out: "
                  + ", ".join(f"`{p.relative_to(root)}`" for p in skipped) + "."]
    if args.soft:
        sp = Path(args.soft)
        if not sp.is_file():
            raise ValueError(f"--soft: {sp} does not exist")
        lines += ["", f"Soft prompt (soft_prompt.py, `{sp.relative_to(root) if sp.is_relative_to(root) else sp}`): "
                  "SummEval coherence, judge smollm2-135m, held-out contexts 80:86 (other contexts than the ZEPO "
                  "rows above; the ZEPO template there is the coherence run's), 24 pairs each in both orders.", "",
                  "| prompt | reading | scorer | debias | comparisons | fairness | P(A) | Spearman [95% CI] |",
                  "|---|---|---|---|---|---|---|---|"]
        for row in soft_rows(sp):
            if row["scorer"] == "average_probability" and row["debias"] == "permutation":
                continue
            lines.append(f"| {row['prompt']} | {row['reading']} | {row['scorer']} | {row['debias']} | "
                         f"{row['comparisons']} | "
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
              "Spearman correlation across prompts of fairness with the prompt's mean Spearman with the humans. "
              "95% CI: Fisher's z with the Bonett-Wright variance (one degree of freedom less per group whose "
              "means are removed beyond the first), the interval the test's p (SciPy, t approximation) goes "
              "with. The bootstrap interval resamples prompts within each group; a resample with no spread in "
              "fairness or Spearman has no correlation and is left out, and the cell says how many were (they "
              "narrow it). distinct values: of fairness / Spearman; where few prompts are off the most common "
              "fairness, the correlation is the ranks of those few, and the row says it rests on few distinct "
              "values.", "",
              "| prompts of | n | Spearman corr. | 95% CI (Fisher z) | bootstrap 95% CI (undefined resamples) | p "
              "| distinct values |", "|---|---|---|---|---|---|---|"]
    corr_rows = []
    for name, (f, s) in groups.items():
        corr_rows.append((name, corr_summary({name: (f, s)}, rng, args.bootstrap, centre=False)))
    smol_se = {k: v for k, v in groups.items() if k.startswith("summeval") and k.endswith("smollm2-135m")}
    for label, sel, centre in (("SummEval, 4 aspects, smollm2-135m, pooled", smol_se, False),
                               ("same, each aspect's means removed", smol_se, True),
                               ("every run pooled, each group's means removed", groups, True)):
        if sel:
            corr_rows.append((label, corr_summary(sel, rng, args.bootstrap, centre=centre)))
    lines += [corr_cells(name, c) for name, c in corr_rows]
    lines += ["", f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}"]
    Path(f"{stem}.md").write_text("\n".join(lines) + "\n")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 5))
    markers = "osD^v<>P*X"
    for k, (name, (f, s)) in enumerate(groups.items()):
        ax.scatter(f, s, marker=markers[k % len(markers)], label=f"{name} (n={len(f)})", alpha=0.8)
    pooled = [c for name, c in corr_rows if name.endswith("pooled")]
    title = "fairness vs human agreement per candidate prompt"
    if pooled and np.isfinite(pooled[0]["ci"][0]):
        title += (f"\nSummEval SmolLM2 pooled: Spearman {pooled[0]['r']:+.2f} "
                  f"[{pooled[0]['ci'][0]:+.2f}, {pooled[0]['ci'][1]:+.2f}] (Fisher z)")
    ax.set_title(title)
    ax.set_xlabel("fairness -|P(A) - 1/2| on the search sample (higher = fairer)")
    ax.set_ylabel("mean Spearman with humans (search contexts)")
    ax.axhline(0, color="grey", lw=0.5)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(f"{stem}.png", dpi=110)
    print(f"wrote {stem}.md, {stem}.png ({len(runs)} ZEPO runs; not study reports, left out: "
          f"{', '.join(str(p) for p in skipped) or 'none'})")


if __name__ == "__main__":
    main()
