"""Merge the soft prompt study's runs (seed + soft lr 1e-2, soft lr 2e-3, ZEPO template) into results/merged/,
keeping the contexts every variant has; then: soft_prompt.py --summarise-only --out experiments/results/merged."""
import json, sys
from pathlib import Path
R = Path(__file__).resolve().parent / "results"
tag = "soft_prompt_summeval_coherence_smollm2-135m_judgements.jsonl"
srcs = [(R / tag, {"seed": "seed", "soft": "soft (lr 1e-2)"}),
        (R / "soft_lr2e-3" / tag, {"soft": "soft (lr 2e-3)"}),
        (R / "zepo_eval" / tag, {"zepo": "zepo"})]
recs = []
for path, names in srcs:
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                if r["variant"] in names:
                    recs.append(dict(r, variant=names[r["variant"]]))
variants = list(dict.fromkeys(r["variant"] for r in recs))
common = set.intersection(*[{r["context"] for r in recs if r["variant"] == v} for v in variants])
recs = [r for r in recs if r["context"] in common]
out = R / "merged"; out.mkdir(exist_ok=True)
(out / tag).write_text("".join(json.dumps(r) + "\n" for r in recs))
print(variants, sorted(common), len(recs))
