"""docs/parameters.md is generated from the config schema and the code's defaults, and every
schema key is described."""

from __future__ import annotations

import copy

import pytest

from conftest import REPO_ROOT
from foldworks import paramdocs
from foldworks.train.config import DEFAULT_DATA, DEFAULT_TRAINER

PAGE = REPO_ROOT / "docs" / "parameters.md"


@pytest.fixture(scope="module")
def schema() -> dict:
    return paramdocs.load_schema()


def test_every_schema_key_has_a_description(schema):
    missing = paramdocs.missing_descriptions(schema)
    assert not missing, f"config schema keys without a description: {', '.join(missing)}"


def test_a_key_without_a_description_is_named(schema):
    broken = copy.deepcopy(schema)
    del broken["properties"]["msa"]["properties"]["databases"]["items"]["properties"]["evalue"]["description"]
    broken["properties"]["experiments"]["additionalProperties"]["properties"]["trainer"]["properties"]["lr"] = {}
    assert paramdocs.missing_descriptions(broken) == ["msa.databases[].evalue", "experiments.<name>.trainer.lr"]


def test_committed_page_is_up_to_date(schema):
    assert PAGE.read_text() == paramdocs.render(schema), \
        "docs/parameters.md is stale: regenerate it with `make docs`"


@pytest.mark.parametrize("section, defaults", [("data", DEFAULT_DATA), ("trainer", DEFAULT_TRAINER)])
def test_experiment_keys_of_the_code_are_the_described_ones(schema, section, defaults):
    node = schema["properties"]["experiments"]["additionalProperties"]["properties"][section]["properties"]
    assert not set(defaults) - set(node), f"{section} keys not described in the schema: {sorted(set(defaults) - set(node))}"
    assert not set(node) - set(defaults), f"schema describes {section} keys the code lacks: {sorted(set(node) - set(defaults))}"
    assert all("default" not in entry for entry in node.values()), f"{section} defaults belong to the code only"


def test_a_new_section_is_rendered_with_its_defaults(schema):
    extended = copy.deepcopy(schema)
    extended["properties"]["extra"] = {
        "description": "an added section", "type": "object", "default": {},
        "properties": {"depth": {"type": "integer", "minimum": 1, "default": 4, "description": "rows (sequences)"},
                       "items": {"type": "array", "default": [], "description": "files | paths"}}}
    page = paramdocs.render(extended, families={})
    assert "## `extra`" in page
    assert "| `extra.depth` | integer ≥ 1 | `4` | rows (sequences) |" in page
    assert "| `extra.items` | array | `[]` | files \\| paths |" in page


def test_model_families_are_listed_with_their_defaults():
    families = paramdocs.family_defaults()
    from foldworks.families import FAMILY_TASKS

    assert set(families) == set(FAMILY_TASKS)
    columns, preset = families["mpnn"]
    assert preset == "v_48_020" and columns["preset v_48_020"]["hidden"] == 128 and columns["preset v_48_020"]["k_neighbors"] == 48
    assert families["distogram"] == ({"default": families["distogram"][0]["default"]}, None)
    columns, preset = families["evoformer"]
    assert preset == "cpu_small" and "preset cpu_small" in columns


def test_check_mode_reports_a_stale_page(tmp_path, capsys):
    stale = tmp_path / "parameters.md"
    stale.write_text("old\n")
    assert paramdocs.main(["--check", str(stale)]) == 1
    assert "stale" in capsys.readouterr().err
    assert paramdocs.main(["--write", str(stale)]) == 0
    assert paramdocs.main(["--check", str(stale)]) == 0
