"""Generate ``docs/parameters.md``: every configuration key with its type, default and description.

Sources, so the page cannot drift from what a run does:

- ``workflow/schemas/config.schema.yaml``: every workflow key, its description and its default
  (the Snakefile fills missing keys from these defaults);
- :data:`foldworks.train.config.DEFAULT_DATA` / :data:`~foldworks.train.config.DEFAULT_TRAINER`:
  the defaults of an experiment's ``data`` and ``trainer`` keys (described in the schema);
- the registered model families (:mod:`foldworks.models`, imports torch): each family's
  ``model_config`` keys and defaults, from its constructor or its ``PRESETS`` table.

Usage::

    python -m foldworks.paramdocs --write docs/parameters.md   # (make docs)
    python -m foldworks.paramdocs --check docs/parameters.md   # exit 1 when stale
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA = REPO_ROOT / "workflow" / "schemas" / "config.schema.yaml"
EXPERIMENT_KEY = "<name>"
#: Keys whose defaults live in foldworks.train.config (their own tables).
_CODE_DEFAULTS = (f"experiments.{EXPERIMENT_KEY}.data.", f"experiments.{EXPERIMENT_KEY}.trainer.")
_BOUNDS = (("minimum", "≥ {}"), ("exclusiveMinimum", "> {}"), ("maximum", "≤ {}"), ("exclusiveMaximum", "< {}"))

HEADER = """# Configuration parameters

Generated from `workflow/schemas/config.schema.yaml` and the defaults in the code by `make docs`
(`python -m foldworks.paramdocs --write docs/parameters.md`); do not edit by hand.

A run's configuration is its `--configfile` files, merged in order, or, when none is given, the demo
configuration `config/config.yaml`. Every key a file leaves out takes the default shown here;
a key without a default (*required*) must be set. Experiments are never taken from the demo when a
file is given: a configuration runs exactly the experiments it lists.
"""


def load_schema(path: Path = SCHEMA) -> dict[str, Any]:
    """The config schema as a dict."""
    return yaml.safe_load(Path(path).read_text())


def iter_keys(node: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every configuration key below ``node`` as ``(dotted path, schema node)``, depth first.

    Items of an array of objects appear as ``key[].sub``; the entries of a free-form mapping
    (``experiments``) as ``key.<name>.sub``."""
    for name, child in (node.get("properties") or {}).items():
        yield f"{prefix}{name}", child
        yield from iter_keys(child, f"{prefix}{name}.")
    items = node.get("items")
    if isinstance(items, dict) and "properties" in items:
        yield from iter_keys(items, f"{prefix.rstrip('.')}[].")
    entries = node.get("additionalProperties")
    if isinstance(entries, dict) and "properties" in entries:
        yield from iter_keys(entries, f"{prefix}{EXPERIMENT_KEY}.")


def missing_descriptions(schema: dict[str, Any]) -> list[str]:
    """Dotted paths of the schema keys that have no non-empty ``description``."""
    return [path for path, node in iter_keys(schema) if not str(node.get("description") or "").strip()]


def type_text(node: dict[str, Any]) -> str:
    """A key's type and bounds in words, e.g. ``integer ≥ 1``, ``one of hhblits, mmseqs``."""
    if "const" in node:
        return f"always {default_text(node['const'])}"
    if "enum" in node:
        return "one of " + ", ".join(default_text(value) for value in node["enum"])
    if "oneOf" in node:
        return " or ".join(type_text(option) for option in node["oneOf"])
    kinds = node.get("type", "")
    text = " or ".join(kinds) if isinstance(kinds, list) else str(kinds)
    if text.startswith("array") and isinstance(node.get("items"), dict) and "enum" in node["items"]:
        text += " of " + ", ".join(default_text(value) for value in node["items"]["enum"])
    bounds = [form.format(node[key]) for key, form in _BOUNDS if key in node]
    return " ".join([text, *bounds]).strip()


def default_text(value: Any) -> str:
    """A default as it is written in YAML flow style (``null``, ``true``, ``[test]``)."""
    if isinstance(value, str):
        return value
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000, allow_unicode=True).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _prose(text: Any) -> str:
    """A description as Markdown table text (angle brackets shown, not read as HTML)."""
    return str(text or "").replace("<", "&lt;").replace(">", "&gt;")


def _row(*cells: str) -> str:
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def schema_table(schema: dict[str, Any], section: str) -> list[str]:
    """Markdown table of the keys below one top-level section."""
    node = schema["properties"][section]
    rows = [_row("key", "type", "default", "description"), "|---|---|---|---|"]
    for path, child in iter_keys(node, f"{section}."):
        if path.startswith(_CODE_DEFAULTS):
            continue  # listed with their defaults from the code in their own tables
        parent_required = _required_of(schema, path)
        if "default" in child:
            default = f"`{default_text(child['default'])}`"
        elif parent_required:
            default = "*required*"
        else:
            default = "—"
        rows.append(_row(f"`{path}`", type_text(child), default, _prose(child.get("description"))))
    return rows


def _required_of(schema: dict[str, Any], path: str) -> bool:
    """True when ``path``'s parent object lists it under ``required``."""
    parts = path.replace("[]", "").split(".")
    node = schema
    for part in parts[:-1]:
        if part == EXPERIMENT_KEY:
            node = node["additionalProperties"]
            continue
        node = node["properties"][part]
        if "items" in node and isinstance(node["items"], dict) and "properties" in node["items"]:
            node = node["items"]
    return parts[-1] in node.get("required", [])


def experiment_table(schema: dict[str, Any], section: str, defaults: dict[str, Any]) -> list[str]:
    """Table of an experiment's ``data``/``trainer`` keys: defaults from the code, text from the schema."""
    described = schema["properties"]["experiments"]["additionalProperties"]["properties"][section]["properties"]
    rows = [_row("key", "default", "description"), "|---|---|---|"]
    for key, value in defaults.items():
        text = _prose((described.get(key) or {}).get("description"))
        rows.append(_row(f"`{key}`", f"`{default_text(value)}`", text))
    return rows


#: A family's ``model_config`` defaults: ``({column: {key: default}}, default preset or None)``.
FamilyDefaults = tuple[dict[str, dict[str, Any]], str | None]


def family_defaults() -> dict[str, FamilyDefaults]:
    """The ``model_config`` defaults of every family in :data:`foldworks.families.FAMILY_TASKS`
    (imports torch; families registered only at run time, e.g. by tests, are left out).

    A family whose constructor takes a ``preset`` and whose module defines ``PRESETS`` gets one
    column per preset; any other family one column ``default`` of its constructor's defaults."""
    from foldworks.families import FAMILY_TASKS
    from foldworks.models import MODEL_REGISTRY

    families: dict[str, FamilyDefaults] = {}
    for name in sorted(FAMILY_TASKS):
        cls = MODEL_REGISTRY[name]
        params = inspect.signature(cls.__init__).parameters
        presets = getattr(sys.modules[cls.__module__], "PRESETS", None)
        if "preset" in params and isinstance(presets, dict):
            columns = {f"preset {preset}": dict(values) for preset, values in presets.items()}
            default = params["preset"].default or getattr(sys.modules[cls.__module__], "DEFAULT_PRESET", None)
            families[name] = (columns, None if default is None else str(default))
        else:
            defaults = {key: p.default for key, p in params.items()
                        if key != "self" and p.default is not inspect.Parameter.empty}
            families[name] = ({"default": defaults}, None)
    return families


def family_table(name: str, family: FamilyDefaults) -> list[str]:
    """Markdown table of one family's ``model_config`` keys (one column per preset)."""
    from foldworks.families import FAMILY_TASKS

    columns, preset = family
    lines = [f"### `{name}` ({FAMILY_TASKS.get(name, 'structure')})", ""]
    if preset is not None:
        lines += [f"`preset` picks a column (default `{preset}`); any key below may be set "
                  "in `model_config` to override the preset's value.", ""]
    names = list(columns)
    keys = sorted({key for values in columns.values() for key in values})
    lines += [_row("key", *names), "|" + "---|" * (len(names) + 1)]
    for key in keys:
        lines.append(_row(f"`{key}`", *(f"`{default_text(columns[c][key])}`" if key in columns[c] else "—"
                                         for c in names)))
    return lines + [""]


def render(schema: dict[str, Any], families: dict[str, FamilyDefaults] | None = None) -> str:
    """The whole page (Markdown) for ``schema``; ``families`` from :func:`family_defaults` when None."""
    from foldworks.train.config import DEFAULT_DATA, DEFAULT_TRAINER

    lines = [HEADER]
    required = set(schema.get("required", []))
    for section, node in schema["properties"].items():
        about = _prose(node.get("description")) + (" (required section)" if section in required else "")
        lines += [f"## `{section}`", "", about, "", *schema_table(schema, section), ""]
    lines += ["## Experiment `data` keys", "", *experiment_table(schema, "data", DEFAULT_DATA), "",
              "## Experiment `trainer` keys", "", *experiment_table(schema, "trainer", DEFAULT_TRAINER), "",
              "## Model families (`model_config`)", "",
              "Each family's settings and their defaults; see the family's module in "
              "`src/foldworks/models/` for what each one does.", ""]
    for name, family in (family_defaults() if families is None else families).items():
        lines += family_table(name, family)
    return "\n".join(lines).rstrip() + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w") as stream:
            stream.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m foldworks.paramdocs", description=__doc__.split("\n\n")[0])
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--write", type=Path, metavar="MD", help="write the page to this file")
    action.add_argument("--check", type=Path, metavar="MD", help="exit 1 when this file differs from the page")
    parser.add_argument("--schema", type=Path, default=SCHEMA, help="config schema (default: the repository's)")
    args = parser.parse_args(argv)
    schema = load_schema(args.schema)
    if missing := missing_descriptions(schema):
        print(f"{args.schema}: keys without a description: {', '.join(missing)}", file=sys.stderr)
        return 1
    page = render(schema)
    if args.write:
        write_atomic(args.write, page)
        return 0
    if not args.check.exists() or args.check.read_text() != page:
        print(f"{args.check} is stale: regenerate it with `make docs`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
