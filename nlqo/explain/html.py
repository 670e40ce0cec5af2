"""EXPLAIN as a page: one self-contained HTML file drawn from the EXPLAIN JSON.

The page renders the very dicts ``--format json`` prints (``nlqo.explain.analyze.to_dict``): the
plan tree as boxes with operator, atom and cost terms, and with actuals the time, LLM calls,
tokens, passages and terminator score of each node, the heaviest node highlighted; a click on a
node shows its steps with their prompts and passages. One page can hold several plans (a bench
run's), picked from a list or by the address fragment ``#plan=ID&node=ID``.

Markup, style and script live in ``explain_page.html`` beside this module. The data goes in a
``<script type="application/json">`` block with ``<``, ``>``, ``&``, U+2028 and U+2029 escaped,
and the script builds the DOM with ``textContent`` only, so questions, prompts and passages show
as text whatever they contain. A content security policy allows no network and runs only the
page's own script and style (by hash).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

TEMPLATE = Path(__file__).with_name("page.html")
_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "\u2028": "\\u2028", "\u2029": "\\u2029"}


def script_json(data: Any) -> str:
    """JSON that is inert inside a ``<script>`` element and parses back to ``data``.

    >>> script_json({"t": "</script><b>&"})
    '{"t": "\\\\u003c/script\\\\u003e\\\\u003cb\\\\u003e\\\\u0026"}'
    >>> json.loads(script_json(["a\\u2028b"])) == ["a\\u2028b"]
    True
    """
    text = json.dumps(data, ensure_ascii=False, allow_nan=False)
    return re.sub("[<>&\u2028\u2029]", lambda m: _ESCAPES[m.group(0)], text)


def _digest(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


@functools.cache
def _template() -> str:
    """The page template with its content security policy filled in (hashes of its own script and style)."""
    template = TEMPLATE.read_text(encoding="utf-8")
    (style,) = re.findall(r"<style>(.*?)</style>", template, re.S)
    (script,) = re.findall(r"<script>(.*?)</script>", template, re.S)
    csp = (
        f"default-src 'none'; script-src {_digest(script)}; style-src {_digest(style)}; "
        "img-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
    )
    return template.replace("@@CSP@@", csp)


def entry(
    explain: Mapping[str, Any], *, id: str = "plan", title: str | None = None, notes: Sequence[str] = ()
) -> dict[str, Any]:
    """One plan of a page: its EXPLAIN dict, an id for ``#plan=ID``, a title for the picker, note lines."""
    return {"id": id, "title": title or explain.get("question") or id, "notes": list(notes), "explain": dict(explain)}


def render(entries: Sequence[Mapping[str, Any]]) -> str:
    """The HTML page showing ``entries`` (see :func:`entry`); the first is shown unless the address names another."""
    if not entries:
        raise ValueError("a plan page needs at least one plan")
    return _template().replace("@@PLANS@@", script_json(list(entries)))


def write(path: str | Path, entries: Sequence[Mapping[str, Any]]) -> Path:
    """Write the page for ``entries`` to ``path``."""
    path = Path(path)
    path.write_text(render(entries), encoding="utf-8")
    return path
