"""The API schema as one self-contained HTML page (``/docs``): nothing is loaded from the network."""

from __future__ import annotations

import json
from html import escape
from typing import Any


def schema_page(schema: dict[str, Any]) -> str:
    """The OpenAPI schema as one self-contained HTML page: each endpoint, then the schema itself."""
    rows = []
    for path, methods in schema.get("paths", {}).items():
        for method, op in methods.items():
            rows.append(
                f"<tr><td><code>{escape(method.upper())}</code></td><td><code>{escape(path)}</code></td><td>{escape(op.get('summary', ''))}</td></tr>"
            )
    body = escape(json.dumps(schema, indent=2))
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>nlqo API</title>"
        "<style>body{font:15px system-ui,sans-serif;margin:2em;max-width:70em}td{padding:.2em 1em .2em 0}pre{background:#f4f4f4;padding:1em;overflow:auto}</style>"
        f"</head><body><h1>nlqo API</h1><p>The OpenAPI schema, also as JSON at <a href='/openapi.json'>/openapi.json</a>.</p>"
        f"<table>{''.join(rows)}</table><h2>Schema</h2><pre>{body}</pre></body></html>"
    )
