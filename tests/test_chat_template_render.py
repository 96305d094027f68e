"""``render_chat_template`` in a fresh process: the ``loopcontrols`` extension is imported by the function itself
(``jinja2`` alone does not import ``jinja2.ext``; a server judge with a chat template failed when nothing else
had imported it), and a loop with ``break`` renders as plain Jinja renders it."""

import subprocess
import sys

TEMPLATE = ("{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}<{{ m['role'] }}>{{ m['content'] }}"
            "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}")


def test_renders_in_a_fresh_process_with_loop_controls():
    code = ("from jaxrank.judges.server import render_chat_template as r;"
            f"print(r({TEMPLATE!r}, [dict(role='system', content='s'), dict(role='user', content='u'),"
            "dict(role='user', content='dropped')]), end='')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout == "<system>s<user>u<assistant>"     # what the template says, written out by hand
