"""Every code block of the README and the documentation runs, and the guides type no figure by hand.

Blocks. Every fenced ``python``, ``bash`` and ``sh`` block of ``README.md`` and ``docs/**/*.md`` is executed:

* a block is self-contained: it runs in a fresh process (Python) or shell (bash), in a fresh temporary
  working directory, with ``JAXRANK_DATA`` pointing at the data (``$JAXRANK_DATA``, else ``../shared/data``
  next to the checkout, as ``.ci/run`` sets it) and this interpreter's ``bin`` first on ``PATH`` (so
  ``jaxrank`` and ``python`` are this environment's);
* ``<!-- continues -->`` on the line before a block makes it continue the previous executed block of its page
  in the same language (same process or shell, same directory; a block of another language may sit between);
* ``<!-- no-run: REASON -->`` on the line before a block skips it; the reason is required and the skipped
  blocks are counted (``test_block_count`` prints the counts and keeps the skipped ones few).

Figures. The guides (every page under ``docs/``) take their measured numbers from the result files through
the directives of ``docs/hooks.py`` (``{{ table(...) }}``, ``{{ cell(...) }}``, ...). ``test_no_typed_figures``
finds any number with a decimal point or a percent sign left in a page outside code (fenced blocks and inline
code spans), directives, HTML comments and link targets; ``test_directives_resolve`` renders every directive.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _fixtures_experiments import load_script

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").rglob("*.md") if "notebooks" not in p.parts)
LANGS = {"python": "python", "py": "python", "bash": "bash", "sh": "bash"}
MARKER = re.compile(r"^<!--\s*(continues|no-run:\s*(?P<reason>.*?))\s*-->\s*$")
MAX_SKIPPED = 10


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None = None  # "continues", "no-run" or None
    reason: str = ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


@dataclass
class Session:
    blocks: list[Block] = field(default_factory=list)

    @property
    def where(self) -> str:
        return self.blocks[0].where


def blocks_of(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` in the executed languages, with the marker on the line before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out, k = [], 0
    while k < len(lines):
        m = re.match(r"^(\s*)(```|~~~)\s*([\w+-]*)", lines[k])
        if not m:
            k += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        end = k + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        if lang in LANGS:
            prev = k - 1
            while prev >= 0 and not lines[prev].strip():
                prev -= 1
            mk = MARKER.match(lines[prev].strip()) if prev >= 0 else None
            marker = reason = None
            if mk:
                marker = "continues" if mk.group(1) == "continues" else "no-run"
                reason = (mk.group("reason") or "").strip()
            code = textwrap.dedent("\n".join(line[len(indent):] if line.startswith(indent) else line
                                             for line in lines[k + 1:end]))
            out.append(Block(path, k + 1, LANGS[lang], code, marker, reason or ""))
        k = end + 1
    return out


def all_blocks() -> list[Block]:
    return [b for p in PAGES for b in blocks_of(p)]


def sessions() -> tuple[list[Session], list[Block]]:
    """The executed sessions (a block and the blocks that continue it) and the skipped blocks."""
    runs, skipped, last = [], [], {}
    for b in all_blocks():
        key = (b.path, b.lang)  # a block continues the previous executed block of its page in its language
        if b.marker == "no-run":
            skipped.append(b)
            last.pop(key, None)
        elif b.marker == "continues":
            if key not in last:
                raise AssertionError(f"{b.where}: continues no executed {b.lang} block of the same page")
            last[key].blocks.append(b)
        else:
            last[key] = Session([b])
            runs.append(last[key])
    return runs, skipped


RUNS, SKIPPED = sessions()


def _env(tmp: Path, cache: Path) -> dict:
    env = dict(os.environ)
    data = env.get("JAXRANK_DATA") or str((ROOT.parent / "shared" / "data").resolve())
    env.update(JAXRANK_DATA=data, JAXRANK_CACHE=str(cache), MPLBACKEND="Agg", HOME=env.get("HOME", str(tmp)),
               PATH=os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", ""),
               PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
    env.pop("PYTHONSTARTUP", None)
    return env


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One jaxrank cache (compiled programs, joined model files) shared by the blocks of a run."""
    return tmp_path_factory.mktemp("jaxrank-cache")


@pytest.mark.parametrize("session", RUNS, ids=[s.where for s in RUNS])
def test_block_runs(session: Session, tmp_path: Path, cache: Path):
    lang = session.blocks[0].lang
    parts = []
    for b in session.blocks:
        if lang == "python":
            parts.append(f"# --- {b.where}\n{b.code}\n")
        else:
            parts.append(f"# --- {b.where}\n{b.code}\n")
    if lang == "python":
        script = tmp_path / "block.py"
        script.write_text("".join(parts), encoding="utf-8")
        cmd = [sys.executable, str(script)]
    else:
        script = tmp_path / "block.sh"
        script.write_text("set -euo pipefail\n" + "".join(parts), encoding="utf-8")
        cmd = ["bash", str(script)]
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run(cmd, cwd=work, env=_env(tmp_path, cache), capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (f"{session.where}: the block exits with status {r.returncode}\n--- script\n"
                               f"{script.read_text()}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-6000:]}")


def test_block_count():
    """The counts of executed and skipped blocks; every skipped block says why, and they stay few."""
    executed = sum(len(s.blocks) for s in RUNS)
    print(f"\ndocs code blocks: {executed} executed in {len(RUNS)} sessions, {len(SKIPPED)} skipped")
    for b in SKIPPED:
        print(f"  skipped {b.where}: {b.reason}")
    assert all(b.reason for b in SKIPPED), [b.where for b in SKIPPED if not b.reason]
    assert executed >= 20
    assert len(SKIPPED) <= MAX_SKIPPED


def test_markers_precede_blocks():
    """A marker comment always sits right before an executed block (a stray one would silently do nothing)."""
    for p in PAGES:
        lines = p.read_text(encoding="utf-8").splitlines()
        starts = {b.line for b in blocks_of(p)}
        for k, line in enumerate(lines):
            if MARKER.match(line.strip()):
                nxt = k + 1
                while nxt < len(lines) and not lines[nxt].strip():
                    nxt += 1
                assert nxt + 1 in starts, f"{p.relative_to(ROOT)}:{k + 1}: marker not followed by a code block"


# --- figures ------------------------------------------------------------------------------------------------------


def _hooks():
    return load_script(ROOT / "docs" / "hooks.py", "docs_hooks")


GUIDES = [p for p in PAGES if p.parent != ROOT]
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d[\d,]*\.\d+(?:e[-+]?\d+)?%?|(?<![\w.])\d+(?:\.\d+)?\s?%")


def hand_typed_figures(markdown: str) -> list[str]:
    """Numbers with a decimal point or a percent sign outside code, directives, comments and link targets."""
    hooks = _hooks()
    found = []
    for fenced, text in hooks.split_fences(markdown):
        if fenced:
            continue
        text = hooks.DIRECTIVE.sub(" ", text)
        text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
        text = re.sub(r"(`+)(?:(?!\1).)+?\1", " ", text, flags=re.S)  # inline code spans
        text = re.sub(r"\]\([^)]*\)", "]", text)  # link targets
        text = re.sub(r"§\s?\d+(?:\.\d+)*", " ", text)  # section numbers of the papers (PoE §3.2)
        text = re.sub(r"^:::.*$(\n^ {4}.*$)*", " ", text, flags=re.M)  # mkdocstrings blocks and options
        found += NUMBER.findall(text)
    return found


def test_no_typed_figures():
    typed = {str(p.relative_to(ROOT)): hand_typed_figures(p.read_text(encoding="utf-8")) for p in GUIDES}
    typed = {k: v for k, v in typed.items() if v}
    assert not typed, f"numbers typed by hand in the guides (read them from a result file with docs/hooks.py): {typed}"


def test_typed_figure_detector():
    md = "Spearman 0.3743 here, `0.5` in code, {{ cell('a', 'b', 'c') }} and 94.4% there; 100 contexts.\n" \
         "```python\nx = 0.25\n```\n"
    assert hand_typed_figures(md) == ["0.3743", "94.4%"]


def test_directives_resolve():
    hooks = _hooks()
    for p in GUIDES:
        page = str(p.relative_to(ROOT / "docs"))
        out = hooks.render(p.read_text(encoding="utf-8"), page)
        assert "{{" not in "".join(t for fenced, t in hooks.split_fences(out) if not fenced), page


def test_directive_errors_name_the_problem():
    hooks = _hooks()
    with pytest.raises(hooks.DirectiveError, match="no such result file"):
        hooks.render("{{ table('benchmarks/results/nope.md') }}")
    with pytest.raises(hooks.DirectiveError, match="no column"):
        hooks.render("{{ cell('benchmarks/results/poe_protocol.csv', 'win_ratio', 'nope') }}")
    with pytest.raises(hooks.DirectiveError, match="no row"):
        hooks.render("{{ cell('benchmarks/results/poe_protocol.csv', 'nope', 'spearman_jaxrank') }}")
    with pytest.raises(hooks.DirectiveError, match="only"):
        hooks.render("{{ table('README.md') }}")


def test_readme_is_short():
    """The README is read in ten minutes: under 12 KB; everything else is in the documentation pages."""
    size = (ROOT / "README.md").stat().st_size
    assert size < 12 * 1024, f"README.md is {size} bytes; move sections to docs/"
