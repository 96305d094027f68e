"""MkDocs hook: figures and tables of the guides are read from the result files when the site is built.

A guide never types a measured number. It names the result file and the place in it, with a directive
written as a Python call between double braces, outside code blocks::

    {{ table("benchmarks/results/poe_protocol.md", 1) }}            the first Markdown table of the file
    {{ table("benchmarks/results/x.csv", columns=["a", "b"]) }}     a CSV file as a table (some columns)
    {{ cell("benchmarks/results/poe_protocol.md", "poe_bradley_terry", "Spearman jaxrank (all repeats)") }}
    {{ cell("benchmarks/results/poe_protocol.csv", "win_ratio", "spearman_jaxrank", fmt=".4f") }}
    {{ grep("benchmarks/results/poe_protocol.md", r"pairwise accuracy ([0-9.]+)") }}
    {{ excerpt("experiments/results/x.md", start="# summeval", stop="**Verdict", lang="text") }}
    {{ include("experiments/REPRODUCTION.md") }}
    {{ figure("experiments/results/zepo_summary.png", "ZEPO's objectives against human agreement") }}

Each directive fails the build (``DirectiveError``) when its file, table, row, column or pattern is missing,
so a renamed result file or a changed table header cannot leave a stale figure behind. Paths are relative to
the repository root and must lie under ``benchmarks/results/``, ``experiments/results/`` or be
``experiments/REPRODUCTION.md``. ``tests/test_docs.py`` uses :func:`render` on every guide and checks that no
number is typed outside these directives.
"""

from __future__ import annotations

import ast
import csv
import io
import posixpath
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALLOWED = ("benchmarks/results/", "experiments/results/", "experiments/REPRODUCTION.md")
DIRECTIVE = re.compile(r"\{\{\s*(\w+)\((.*?)\)\s*\}\}", re.S)
FENCE = re.compile(r"^(\s*)(```|~~~)")
FIGURES = "assets/results"  # where figures are copied in the site


class DirectiveError(ValueError):
    """A directive names a file, table, row, column or pattern that is not there."""


def _path(path: str) -> Path:
    if not any(path == a or path.startswith(a) for a in ALLOWED):
        raise DirectiveError(f"{path}: figures come from benchmarks/results/ or experiments/results/ only")
    p = ROOT / path
    if not p.is_file():
        raise DirectiveError(f"{path}: no such result file")
    return p


def _md_tables(text: str) -> list[list[str]]:
    """The Markdown tables of ``text`` (outside code fences), each as its lines."""
    tables, cur, fenced = [], [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        if not fenced and line.lstrip().startswith("|"):
            cur.append(line.strip())
            continue
        if cur:
            tables.append(cur)
            cur = []
    if cur:
        tables.append(cur)
    return [t for t in tables if len(t) >= 2 and set(t[1].replace("|", "").strip()) <= set("-: ")]


def _cells(line: str) -> list[str]:
    # split on pipes that are not escaped (\|) and not inside a code span
    out, cur, code, k = [], "", False, 0
    body = line.strip()
    body = body[1:] if body.startswith("|") else body
    body = body[:-1] if body.endswith("|") and not body.endswith("\\|") else body
    while k < len(body):
        ch = body[k]
        if ch == "\\" and k + 1 < len(body) and body[k + 1] == "|":
            cur += "\\|"
            k += 2
            continue
        if ch == "`":
            code = not code
        if ch == "|" and not code:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
        k += 1
    out.append(cur.strip())
    return out


def _row(line: str, align: str) -> list[str]:
    """The cells of a table row; a cell holding a bare ``|`` (``max |score diff|``) is kept whole when the plain
    split disagrees with the alignment row's count."""
    cells, n = _cells(line), len(_cells(align))
    if len(cells) != n:
        body = line.strip()
        body = body[1:] if body.startswith("|") else body
        body = body[:-1] if body.endswith("|") else body
        alt = [c.strip() for c in re.split(r"(?<=\s)\|(?=\s)", " " + body + " ")]
        if len(alt) == n:
            return alt
    return cells


def _key(text: str) -> str:
    return re.sub(r"[*`]", "", text).strip()


def _read_csv(p: Path) -> list[dict[str, str]]:
    with p.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _fmt(value: str, fmt: str | None) -> str:
    if fmt is None:
        return value
    try:
        return format(float(value), fmt)
    except ValueError as e:
        raise DirectiveError(f"{value!r} is not a number to format with {fmt!r}") from e


def table(path: str, n: int = 1, columns: list[str] | None = None, fmt: dict | None = None, rows: list[str] | None = None) -> str:
    """The ``n``-th Markdown table (1-based) of a ``.md`` file, or a ``.csv`` file as a table."""
    p = _path(path)
    fmt = fmt or {}
    if p.suffix == ".csv":
        data = _read_csv(p)
        if not data:
            raise DirectiveError(f"{path}: empty CSV")
        header = list(data[0])
        columns = columns or header
        missing = [c for c in columns if c not in header]
        if missing:
            raise DirectiveError(f"{path}: no column {missing[0]!r} (columns: {', '.join(header)})")
        if rows is not None:
            key = header[0]
            found = {r[key] for r in data}
            absent = [r for r in rows if r not in found]
            if absent:
                raise DirectiveError(f"{path}: no row {absent[0]!r} in column {key!r}")
            data = [r for r in data if r[key] in rows]
        lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        lines += ["| " + " | ".join(_fmt(r[c], fmt.get(c)) for c in columns) + " |" for r in data]
        return "\n".join(lines)
    tables = _md_tables(p.read_text(encoding="utf-8"))
    if not 1 <= n <= len(tables):
        raise DirectiveError(f"{path}: no table {n} (it has {len(tables)})")
    t = tables[n - 1]
    if columns is None and rows is None:
        return "\n".join(t)
    header = _row(t[0], t[1])
    keys = [_key(h) for h in header]
    idx = list(range(len(header))) if columns is None else []
    for c in columns or []:
        if c not in keys:
            raise DirectiveError(f"{path}: table {n} has no column {c!r} (columns: {', '.join(keys)})")
        idx.append(keys.index(c))
    body = [_row(line, t[1]) for line in t[2:]]
    if rows is not None:
        found = {_key(r[0]) for r in body}
        absent = [r for r in rows if r not in found]
        if absent:
            raise DirectiveError(f"{path}: table {n} has no row {absent[0]!r}")
        body = [r for r in body if _key(r[0]) in rows]
    align = _cells(t[1])
    out = ["| " + " | ".join(header[k] for k in idx) + " |", "|" + "|".join(align[k] for k in idx) + "|"]
    out += ["| " + " | ".join(r[k] if k < len(r) else "" for k in idx) + " |" for r in body]
    return "\n".join(out)


def cell(path: str, row: str, col: str, table: int = 1, fmt: str | None = None) -> str:
    """One cell: the row whose first cell is ``row``, the column headed ``col`` (Markdown table or CSV)."""
    p = _path(path)
    if p.suffix == ".csv":
        data = _read_csv(p)
        header = list(data[0]) if data else []
        if col not in header:
            raise DirectiveError(f"{path}: no column {col!r} (columns: {', '.join(header)})")
        for r in data:
            if r[header[0]] == row:
                return _fmt(r[col], fmt)
        raise DirectiveError(f"{path}: no row {row!r} in column {header[0]!r}")
    tables = _md_tables(p.read_text(encoding="utf-8"))
    if not 1 <= table <= len(tables):
        raise DirectiveError(f"{path}: no table {table} (it has {len(tables)})")
    t = tables[table - 1]
    keys = [_key(h) for h in _row(t[0], t[1])]
    if col not in keys:
        raise DirectiveError(f"{path}: table {table} has no column {col!r} (columns: {', '.join(keys)})")
    for line in t[2:]:
        cells = _row(line, t[1])
        if _key(cells[0]) == row:
            return _fmt(cells[keys.index(col)], fmt)
    raise DirectiveError(f"{path}: table {table} has no row {row!r}")


def grep(path: str, pattern: str, group: int = 1, fmt: str | None = None) -> str:
    """Group ``group`` of the first match of the regular expression ``pattern`` in the file."""
    m = re.search(pattern, _path(path).read_text(encoding="utf-8"))
    if m is None:
        raise DirectiveError(f"{path}: no match for {pattern!r}")
    return _fmt(m.group(group), fmt)


def excerpt(path: str, start: str, stop: str | None = None, lang: str | None = None, lines: int | None = None) -> str:
    """The lines from the first that starts with ``start`` up to (not including) the first after it that starts
    with ``stop`` (or ``lines`` lines, or to the end), verbatim; in a code fence of ``lang`` if given."""
    text = _path(path).read_text(encoding="utf-8").splitlines()
    first = next((k for k, line in enumerate(text) if line.startswith(start)), None)
    if first is None:
        raise DirectiveError(f"{path}: no line starts with {start!r}")
    if stop is not None:
        last = next((k for k in range(first + 1, len(text)) if text[k].startswith(stop)), None)
        if last is None:
            raise DirectiveError(f"{path}: no line after {start!r} starts with {stop!r}")
    else:
        last = first + lines if lines else len(text)
    body = "\n".join(text[first:last]).rstrip()
    return f"```{lang}\n{body}\n```" if lang else body


_LINK = re.compile(r"(!?)\[([^\]]*)\]\(([^)\s]+)\)")


def include(path: str, shift: int = 1) -> str:
    """A whole Markdown result file, its headings moved down ``shift`` levels and its relative links
    (which point into the repository, not the site) shown as paths."""
    p = _path(path)
    base = posixpath.dirname(path)
    out, fenced = [], False
    for line in p.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            if line.startswith("#"):
                line = "#" * shift + line
            line = _LINK.sub(lambda m: m.group(0) if "://" in m.group(3) or m.group(3).startswith("#")
                             else f"{m.group(2)} (`{posixpath.normpath(posixpath.join(base, m.group(3)))}`)", line)
        out.append(line)
    return "\n".join(out)


def figure(path: str, alt: str, *, _page: str = "index.md") -> str:
    """An image from a result folder, copied into the site (see :func:`on_files`)."""
    _path(path)
    target = f"{FIGURES}/{path}"
    rel = posixpath.relpath(target, posixpath.dirname(_page) or ".")
    return f"![{alt}]({rel})"


def api_names() -> str:
    """The facade's public names (``jaxrank/__init__.py``: ``__all__`` and the module each is loaded from), as a
    table linking each to its entry in the API reference. Read statically: building the site imports no JAX."""
    tree = ast.parse((ROOT / "jaxrank" / "__init__.py").read_text(encoding="utf-8"))
    values = {}
    for node in tree.body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id in ("_LAZY", "__all__"):
            values[target.id] = ast.literal_eval(node.value)
    lazy, names = values["_LAZY"], values["__all__"]
    # names a package loads lazily itself (not visible to static analysis), by where they are documented
    canonical = {"jaxrank.scoring": {"bradley_terry": "jaxrank.scoring.bradley_terry"},
                 "jaxrank.judges": {"SoftPrompt": "jaxrank.judges.soft_prompt", "train_soft_prompt": "jaxrank.judges.soft_prompt"}}
    rows = ["| name | module |", "|---|---|"]
    for name in names:
        if name in lazy:
            mod = canonical.get(lazy[name], {}).get(name, lazy[name])
            rows.append(f"| [`{name}`][{mod}.{name}] | [`{lazy[name]}`][{lazy[name]}] |")
        elif name == "SCORERS":
            rows.append(f"| `SCORERS` | every scorer by its `--method` name: [`jaxrank.scorer_table`][jaxrank.scorer_table] |")
        else:
            rows.append(f"| [`jaxrank.{name}`][jaxrank.{name}] | module |")
    return "\n".join(rows)


DIRECTIVES = {f.__name__: f for f in (table, cell, grep, excerpt, include, figure, api_names)}


def _call(name: str, args: str, page: str) -> str:
    if name not in DIRECTIVES:
        raise DirectiveError(f"{page}: unknown directive {name!r} (known: {', '.join(DIRECTIVES)})")
    try:
        call = ast.parse(f"f({args})", mode="eval").body
        pos = [ast.literal_eval(a) for a in call.args]
        kw = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    except (SyntaxError, ValueError) as e:
        raise DirectiveError(f"{page}: cannot read the arguments of {name}({args}): {e}") from e
    if name == "figure":
        kw["_page"] = page
    try:
        return DIRECTIVES[name](*pos, **kw)
    except DirectiveError as e:
        raise DirectiveError(f"{page}: {name}(): {e}") from e


def split_fences(markdown: str) -> list[tuple[bool, str]]:
    """``markdown`` as consecutive (inside a code fence?, text) parts."""
    parts, cur, fenced = [], [], False
    for line in markdown.splitlines(keepends=True):
        if FENCE.match(line):
            if not fenced:
                parts.append((False, "".join(cur)))
                cur = [line]
                fenced = True
            else:
                cur.append(line)
                parts.append((True, "".join(cur)))
                cur = []
                fenced = False
            continue
        cur.append(line)
    parts.append((fenced, "".join(cur)))
    return [p for p in parts if p[1]]


def render(markdown: str, page: str = "index.md") -> str:
    """``markdown`` with every directive outside code fences replaced by what it reads."""
    return "".join(text if fenced else DIRECTIVE.sub(lambda m: _call(m.group(1), m.group(2), page), text)
                   for fenced, text in split_fences(markdown))


def figures_of(markdown: str) -> list[str]:
    """The result images a page's directives name."""
    out = []
    for fenced, text in split_fences(markdown):
        if not fenced:
            for m in DIRECTIVE.finditer(text):
                if m.group(1) == "figure":
                    out.append(ast.literal_eval(ast.parse(f"f({m.group(2)})", mode="eval").body.args[0]))
    return out


# --- MkDocs events ---------------------------------------------------------------------------------------------


def on_files(files, config):
    """Copy every image a guide names into the site, under ``assets/results/``."""
    from mkdocs.structure.files import File

    docs = Path(config["docs_dir"])
    wanted = set()
    for md in docs.rglob("*.md"):
        wanted.update(figures_of(md.read_text(encoding="utf-8")))
    for path in sorted(wanted):
        files.append(File.generated(config, f"{FIGURES}/{path}", abs_src_path=str(_path(path))))
    return files


def on_page_markdown(markdown, page, config, files):
    from mkdocs.exceptions import PluginError

    try:
        return render(markdown, page.file.src_uri)
    except DirectiveError as e:
        raise PluginError(str(e)) from e


def on_config(config):
    """List every notebook of ``notebooks/`` under *Notebooks* in the navigation, those not named there by their
    first heading, so a new notebook is rendered without editing ``mkdocs.yml``."""
    import json

    nav = config.get("nav") or []
    section = next((item for item in nav if isinstance(item, dict) and "Notebooks" in item), None)
    if section is None:
        return config
    entries = section["Notebooks"]
    listed = {next(iter(e.values())) if isinstance(e, dict) else e for e in entries}
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        uri = f"notebooks/{nb.name}"
        if uri in listed:
            continue
        title = nb.stem.replace("_", " ").capitalize()
        try:
            for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
                src = "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
                if c["cell_type"] == "markdown" and src.lstrip().startswith("# "):
                    title = src.lstrip()[2:].splitlines()[0].strip()
                    break
        except (ValueError, KeyError):
            pass
        entries.append({title: uri})
    return config


_ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj|const):(<code>)~?(?:[\w.]*\.)?")


def on_page_content(html, page, config, files):
    """Docstrings cite names in Sphinx roles (``:func:`~jaxrank.win_ratio```), which Markdown leaves as text:
    show them as the code they name (``win_ratio``)."""
    if page.file.src_uri.startswith("reference/"):
        html = _ROLE.sub(lambda m: m.group(1) + _short(m.group(0)), html)
    return html


def _short(role: str) -> str:
    # ":func:<code>~jaxrank.scoring.win_ratio" -> "" (the name follows in the same code element); a name without
    # "~" keeps its full dotted path, as Sphinx shows it
    return "" if "~" in role else role.split("<code>", 1)[1]
