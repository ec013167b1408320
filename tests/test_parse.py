"""parse stage: one test per cleaning behaviour, on real mirror entries, checked against the
mirror's MANIFEST and against the raw file read independently with gemmi."""

from __future__ import annotations

import csv
import functools
import gzip
import json
import subprocess
import sys
from pathlib import Path

import gemmi
import numpy as np
import pytest

from foldworks.constants import ATOM_ORDER, CA_INDEX, RESTYPES
from foldworks.ids import InvalidIdentifier
from foldworks.parse import (
    ARRAY_NAMES, ParsedEntry, load_parsed_chain, parse_entry, read_parsed_json, write_parsed,
)

MIRROR_ENTRIES_CHECKED = ("1aki", "1a4w", "1bna", "1crr", "1dix", "1k6p", "1l2y", "1o1z", "1stp",
                          "2axd", "3nzd", "4i39", "4zey", "1a8o", "5pti", "1ubi", "1ffk", "6yfy")


@pytest.fixture(scope="module")
def parse(pdb_mirror: Path):
    """``parse(entry, **options)``: cached parse of one mirror entry (``.cif.gz`` or ``.pdb.gz``)."""

    @functools.lru_cache(maxsize=None)
    def _parse(entry: str, **options: bool) -> ParsedEntry:
        path = pdb_mirror / f"{entry}.cif.gz"
        if not path.exists():
            path = pdb_mirror / f"{entry}.pdb.gz"
        parsed = parse_entry(path, entry, options)
        assert parsed.status == "ok", parsed.reason
        return parsed

    return _parse


@pytest.fixture(scope="module")
def manifest(pdb_mirror: Path) -> dict[str, dict[str, str]]:
    with open(pdb_mirror / "MANIFEST.tsv", newline="") as handle:
        return {row["pdb_id"].lower(): row for row in csv.DictReader(handle, delimiter="\t")}


def _chain(parsed: ParsedEntry, chain: str) -> dict:
    return next(c for c in parsed.chains if c["chain"] == chain)


def _scheme(pdb_mirror: Path, entry: str, chain: str) -> list[tuple[int, bool, str]]:
    """``(seq_id, observed, auth_seq_num)`` per position from ``_pdbx_poly_seq_scheme`` (first row wins)."""
    block = gemmi.cif.read(str(pdb_mirror / f"{entry}.cif.gz")).sole_block()
    table = block.find("_pdbx_poly_seq_scheme.", ["seq_id", "pdb_mon_id", "auth_seq_num", "pdb_strand_id"])
    rows: dict[int, tuple[int, bool, str]] = {}
    for row in table:
        if row.str(3) == chain and int(row.str(0)) not in rows:
            rows[int(row.str(0))] = (int(row.str(0)), not gemmi.cif.is_null(row[1]), row.str(2))
    return [rows[k] for k in sorted(rows)]


def _first_model_atoms(path: Path, chain: str) -> dict[tuple[int, str, str], list[float]]:
    """``(label_seq, atom name, altloc) → xyz`` of the first model in the file, read with gemmi."""
    st = gemmi.read_structure(str(path))
    return {(r.label_seq, a.name, a.altloc): a.pos.tolist() for r in st[0][chain] for a in r if r.label_seq}


# ---------------------------------------------------------------- basic entry and file format


def test_basic_1aki(parse, manifest) -> None:
    p = parse("1aki")
    assert (p.method, p.resolution, p.n_models) == ("X-RAY DIFFRACTION", 1.5, 1)
    assert (p.release_date, p.deposition_date) == ("1997-11-19", "1997-05-19")
    assert [c["chain"] for c in p.chains] == ["A"]
    chain = p.chains[0]
    assert chain["molecule_type"] == "protein" and chain["entity_id"] == "1"
    assert chain["sequence"].startswith("KVFGRCELAAAMKRHGLDNYRG") and chain["length"] == 129
    assert chain["n_resolved"] == int(manifest["1aki"]["n_polymer_residues"]) == 129
    assert p.ligands == []  # 78 waters removed
    a = p.arrays["A"]
    assert a["aatype"].dtype == np.int8 and a["aatype"].shape == (129,)
    assert a["atom_positions"].dtype == np.float32 and a["atom_positions"].shape == (129, 37, 3)
    assert a["atom_mask"].shape == (129, 37) and a["residue_mask"].all()
    assert a["aatype"].tolist()[:3] == [RESTYPES.index(x) for x in "KVF"]
    ca = a["atom_positions"][:, CA_INDEX]
    gaps = np.linalg.norm(np.diff(ca, axis=0), axis=1)
    assert np.all((gaps > 3.7) & (gaps < 3.9))  # trans peptide CA-CA ~3.8 Å, no cis-Pro in 1AKI
    assert a["atom_mask"].sum() == 1001  # heavy atoms of 1AKI's protein, no altlocs


def test_write_and_load_roundtrip(parse, tmp_path: Path) -> None:
    p = parse("1a4w")
    npz, js = tmp_path / "p" / "1a4w.npz", tmp_path / "p" / "1a4w.json"
    write_parsed(p, npz, js)
    meta = read_parsed_json(js)
    assert meta["status"] == "ok" and meta["reason"] is None
    assert [c["chain"] for c in meta["chains"]] == ["L", "H", "I"]
    assert set(np.load(npz).files) == {f"{c}/{n}" for c in "LHI" for n in ARRAY_NAMES}
    loaded = load_parsed_chain(npz, "H")
    for name in ARRAY_NAMES:
        assert np.array_equal(loaded[name], p.arrays["H"][name]) and loaded[name].dtype == p.arrays["H"][name].dtype
    with pytest.raises(KeyError, match="'Z'"):
        load_parsed_chain(npz, "Z")
    assert sorted(p.to_json()) == sorted(["entry", "status", "reason", "failed_stage", "method", "resolution",
                                          "release_date", "deposition_date", "n_models", "chains", "ligands"])
    assert meta["failed_stage"] is None


@pytest.mark.parametrize("entry", MIRROR_ENTRIES_CHECKED)
def test_counts_match_mirror_manifest(entry: str, parse, manifest) -> None:
    p, row = parse(entry), manifest[entry]
    assert len(p.chains) == int(row["n_chains"])
    assert sum(c["n_resolved"] for c in p.chains) == int(row["n_polymer_residues"])
    assert p.n_models == int(row["n_models"])
    if row["resolution"] == "NA":
        assert p.resolution is None
    else:
        assert p.resolution == pytest.approx(float(row["resolution"]))


# ---------------------------------------------------------------- cleaning behaviours


@pytest.mark.parametrize("entry", ["4zey", "1a8o"])
def test_mse_to_met(entry: str, parse, pdb_mirror: Path) -> None:
    st = gemmi.read_structure(str(pdb_mirror / f"{entry}.cif.gz"))
    mse = {r.label_seq: r["SE"][0].pos.tolist() for r in st[0]["A"] if r.name == "MSE" and r.find_atom("SE", "*")}
    assert mse, "entry should contain selenomethionine"
    p, sd = parse(entry), ATOM_ORDER["SD"]
    a, seq = p.arrays["A"], _chain(p, "A")["sequence"]
    for label_seq, se_xyz in mse.items():
        i = label_seq - 1
        assert seq[i] == "M" and a["aatype"][i] == RESTYPES.index("M")
        assert a["atom_mask"][i, sd]
        np.testing.assert_allclose(a["atom_positions"][i, sd], se_xyz, atol=1e-4)
    kept = parse(entry, mse_to_met=False).arrays["A"]
    idx = [s - 1 for s in mse]
    assert not kept["atom_mask"][idx, sd].any()  # SE has no atom37 slot without the rename
    assert kept["residue_mask"][idx].all()


def test_altloc_highest_mean_occupancy_wins(parse, pdb_mirror: Path) -> None:
    # 4LZT Ser85: altloc A occupancy 0.37, B 0.63 -> B (not the first altloc) is kept.
    atoms = _first_model_atoms(pdb_mirror / "4lzt.cif.gz", "A")
    og = parse("4lzt").arrays["A"]["atom_positions"][84, ATOM_ORDER["OG"]]
    np.testing.assert_allclose(og, atoms[(85, "OG", "B")], atol=1e-4)
    assert not np.allclose(og, atoms[(85, "OG", "A")], atol=1e-2)


def test_altloc_every_atom_4i39(parse, pdb_mirror: Path, manifest) -> None:
    # 4I39 gives altlocs A/B to every atom, at equal occupancy -> ties keep altloc A everywhere.
    atoms = _first_model_atoms(pdb_mirror / "4i39.cif.gz", "A")
    a = parse("4i39").arrays["A"]
    assert a["residue_mask"].sum() == int(manifest["4i39"]["n_polymer_residues"])
    for i in np.nonzero(a["residue_mask"])[0]:
        np.testing.assert_allclose(a["atom_positions"][i, CA_INDEX], atoms[(i + 1, "CA", "A")], atol=1e-4)


def test_numeric_altlocs_1k6p(parse, pdb_mirror: Path) -> None:
    # 1K6P uses altloc IDs '1' and '2' (occupancy 0.5 each, e.g. Ile50 of both chains): tie -> '1'.
    p = parse("1k6p")
    for chain in ("A", "B"):
        atoms = _first_model_atoms(pdb_mirror / "1k6p.cif.gz", chain)
        assert (50, "CD1", "2") in atoms and (50, "CD1", "1") in atoms
        cd1 = p.arrays[chain]["atom_positions"][49, ATOM_ORDER["CD1"]]
        np.testing.assert_allclose(cd1, atoms[(50, "CD1", "1")], atol=1e-4)


def test_microheterogeneity_first_listed_residue_wins(parse, pdb_mirror: Path) -> None:
    # 3U7T position 22 is SER (altloc A) / PRO (altloc B); _entity_poly_seq lists SER first.
    p = parse("3u7t")
    a = p.arrays["A"]
    assert _chain(p, "A")["sequence"][21] == "S" and a["aatype"][21] == RESTYPES.index("S")
    assert a["atom_mask"][21, ATOM_ORDER["OG"]] and not a["atom_mask"][21, ATOM_ORDER["CG"]]


def test_nmr_first_model_1l2y(parse, pdb_mirror: Path) -> None:
    p = parse("1l2y")
    assert (p.n_models, p.method, p.resolution) == (38, "SOLUTION NMR", None)
    st = gemmi.read_structure(str(pdb_mirror / "1l2y.cif.gz"))
    first = np.array([r["CA"][0].pos.tolist() for r in st[0]["A"]])
    second = np.array([r["CA"][0].pos.tolist() for r in st[1]["A"]])
    ca = p.arrays["A"]["atom_positions"][:, CA_INDEX]
    np.testing.assert_allclose(ca, first, atol=1e-4)
    assert not np.allclose(ca, second, atol=1e-2)


def test_model_numbering_starts_at_21_1crr(parse, pdb_mirror: Path) -> None:
    st = gemmi.read_structure(str(pdb_mirror / "1crr.cif.gz"))
    assert st[0].num == 21
    expected = {r.label_seq: r["CA"][0].pos.tolist() for r in st[0]["A"] if r.find_atom("CA", "*")}
    p = parse("1crr")
    assert p.n_models == 20 and _chain(p, "A")["n_resolved"] == 166
    ca = p.arrays["A"]["atom_positions"][:, CA_INDEX]
    for label_seq, xyz in expected.items():
        np.testing.assert_allclose(ca[label_seq - 1], xyz, atol=1e-4)
    assert {"name": "GDP", "chain": "A", "count": 1, "kind": "ligand"} in p.ligands


def test_models_with_different_atom_counts_2axd(parse, pdb_mirror: Path) -> None:
    st = gemmi.read_structure(str(pdb_mirror / "2axd.cif.gz"))
    st.remove_hydrogens()
    counts = {st[i].count_atom_sites() for i in range(len(st))}
    assert len(counts) > 1  # the edge case is really there
    p = parse("2axd")
    assert p.n_models == 12 and [c["chain"] for c in p.chains] == ["S"]
    assert p.arrays["S"]["atom_mask"].sum() <= st[0].count_atom_sites()


@pytest.mark.parametrize("entry, chain", [("1dix", "A"), ("1o1z", "A"), ("1stp", "A"), ("1a4w", "H")])
def test_placement_and_resolved_mask_follow_poly_seq_scheme(entry: str, chain: str, parse, pdb_mirror: Path) -> None:
    scheme = _scheme(pdb_mirror, entry, chain)
    a = parse(entry).arrays[chain]
    assert len(scheme) == len(a["residue_mask"])
    observed = np.array([obs for _, obs, _ in scheme])
    assert np.array_equal(a["residue_mask"], observed)
    expected_auth = [int(auth) if obs else -9999 for _, obs, auth in scheme]
    assert a["auth_seq_id"].tolist() == expected_auth
    assert not a["atom_mask"][~observed].any() and not a["atom_positions"][~observed].any()


def test_unresolved_region_1stp(parse) -> None:
    a, chain = parse("1stp").arrays["A"], _chain(parse("1stp"), "A")
    assert chain["length"] == 159 and chain["n_resolved"] == 121
    resolved = np.nonzero(a["residue_mask"])[0]
    assert (resolved[0], resolved[-1]) == (12, 132)  # core streptavidin: residues 13-133 of 159
    assert len(resolved) == 121  # one contiguous stretch, disordered termini
    assert a["auth_seq_id"][12] == 13 and a["auth_seq_id"][11] == -9999
    assert chain["resolved_fraction"] == pytest.approx(121 / 159, abs=1e-4)


def test_insertion_codes_1dix(parse) -> None:
    auth = parse("1dix").arrays["A"]["auth_seq_id"]
    resolved = auth[auth != -9999]
    assert len(resolved) == 208 and len(set(resolved.tolist())) < len(resolved)  # same number, new icode


def test_negative_residue_numbers_1o1z(parse) -> None:
    auth = parse("1o1z").arrays["A"]["auth_seq_id"]
    assert auth[auth != -9999].min() < 0


def test_dna_typed_and_not_in_npz_1bna(parse) -> None:
    p = parse("1bna")
    assert [(c["chain"], c["molecule_type"], c["sequence"]) for c in p.chains] == [
        ("A", "dna", "CGCGAATTCGCG"), ("B", "dna", "CGCGAATTCGCG")]
    assert p.arrays == {}


def test_protein_rna_complex_1ffk(parse) -> None:
    p = parse("1ffk")
    types = {c["molecule_type"] for c in p.chains}
    assert types == {"protein", "rna"}
    assert set(p.arrays) == {c["chain"] for c in p.chains if c["molecule_type"] == "protein"}


def test_hydrogens_deuterium_and_heavy_water_removed_5pti(parse, pdb_mirror: Path) -> None:
    st = gemmi.read_structure(str(pdb_mirror / "5pti.cif.gz"))
    h_xyz = np.array([a.pos.tolist() for ch in st[0] for r in ch for a in r if a.is_hydrogen()])
    assert len(h_xyz) > 400  # joint X-ray/neutron entry with explicit H and D
    p = parse("5pti")
    a = p.arrays["A"]
    placed = a["atom_positions"][a["atom_mask"]]
    nearest = np.min(np.linalg.norm(placed[:, None, :] - h_xyz[None, :, :], axis=-1), axis=1)
    assert nearest.min() > 0.5  # no placed atom sits on a hydrogen/deuterium position
    assert p.method == "X-RAY DIFFRACTION+NEUTRON DIFFRACTION"
    assert {lig["name"] for lig in p.ligands} == {"UNX"}  # 63 DOD waters and PO4 (aid) removed
    with_waters = parse("5pti", remove_waters=False)
    assert {"chain": "A", "name": "DOD", "count": 63, "kind": "water"} in with_waters.ligands


def test_modified_residue_tys_to_tyr_1a4w(parse, pdb_mirror: Path) -> None:
    st = gemmi.read_structure(str(pdb_mirror / "1a4w.cif.gz"))
    tys = [r.label_seq for r in st[0]["I"] if r.name == "TYS"]
    assert len(tys) == 1
    i = tys[0] - 1
    a, seq = parse("1a4w").arrays["I"], _chain(parse("1a4w"), "I")["sequence"]
    assert seq[i] == "Y" and a["aatype"][i] == RESTYPES.index("Y")
    assert a["atom_mask"][i, ATOM_ORDER["OH"]] and a["residue_mask"][i]


def test_chromophore_without_ca_is_unresolved_1ema(parse, manifest) -> None:
    # CRO (GFP chromophore) has no atom named CA -> residue_mask False by the CA rule; the
    # MANIFEST counts it as modelled, hence one fewer resolved residue than n_polymer_residues.
    p = parse("1ema")
    assert _chain(p, "A")["n_resolved"] == int(manifest["1ema"]["n_polymer_residues"]) - 1


def test_ligands_recorded_3nzd(parse) -> None:
    p = parse("3nzd")
    assert p.ligands == [{"chain": "A", "name": "D2Q", "count": 1, "kind": "ligand"},
                         {"chain": "A", "name": "NDP", "count": 1, "kind": "ligand"}]


def test_legacy_pdb_input_1ubi(parse, pdb_mirror: Path, tmp_path: Path) -> None:
    p = parse("1ubi")
    chain = _chain(p, "A")
    assert chain["sequence"] == "MQIFVKTLTGKTITLEVEPSDTIENVKAKIQDKEGIPPDQQRLIFAGKQLEDGRTLSDYNIQKESTLHLVLRLRGG"
    assert chain["n_resolved"] == 76 and chain["entity_id"] == "1"
    assert (p.release_date, p.deposition_date, p.resolution) == ("1994-05-31", "1994-02-03", 1.8)
    # parsing the fetch stage's converted mmCIF gives the same arrays
    from foldworks.fetch import fetch_entry
    fetch_entry("1ubi", str(pdb_mirror), tmp_path / "1ubi.cif.gz", tmp_path / "1ubi.json")
    converted = parse_entry(tmp_path / "1ubi.cif.gz", "1ubi")
    for name in ARRAY_NAMES:
        assert np.array_equal(converted.arrays["A"][name], p.arrays["A"][name])


def test_d_peptide_typed_other_5gob(parse) -> None:
    p = parse("5gob")
    assert [(c["chain"], c["molecule_type"]) for c in p.chains] == [("A", "protein"), ("B", "other")]
    assert set(p.arrays) == {"A"}


# ---------------------------------------------------------------- failures and CLI


def test_broken_entry_gives_failed_record(tmp_path: Path) -> None:
    path = tmp_path / "9xyz.cif.gz"
    path.write_bytes(gzip.compress(b"data_9XYZ\n_entry.id 9XYZ\n_cell.length_a 10.0\n"))
    p = parse_entry(path, "9xyz")
    assert p.status == "failed" and "9xyz" in p.reason and "atom_site" in p.reason and "\n" not in p.reason
    assert p.chains == [] and p.arrays == {}


def test_invalid_arguments_raise(pdb_mirror: Path) -> None:
    with pytest.raises(InvalidIdentifier):
        parse_entry(pdb_mirror / "1aki.cif.gz", "../x")
    with pytest.raises(ValueError, match="first_model_only"):
        parse_entry(pdb_mirror / "1aki.cif.gz", "1aki", {"first_model_only": False})
    with pytest.raises(ValueError, match="unknown parse option"):
        parse_entry(pdb_mirror / "1aki.cif.gz", "1aki", {"mse2met": True})


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "foldworks.parse", *args], capture_output=True, text=True, timeout=60)


def test_cli_ok_failed_and_bad_args(pdb_mirror: Path, tmp_path: Path) -> None:
    params = json.dumps({"mse_to_met": True, "remove_hydrogens": True, "remove_waters": True, "first_model_only": True})
    ok = _cli("--entry", "1aki", "--input", str(pdb_mirror / "1aki.cif.gz"), "--out-npz", str(tmp_path / "1aki.npz"),
              "--out-json", str(tmp_path / "1aki.json"), "--params", params)
    assert ok.returncode == 0, ok.stderr
    assert read_parsed_json(tmp_path / "1aki.json")["chains"][0]["n_resolved"] == 129
    broken = tmp_path / "9xyz.cif.gz"
    broken.write_bytes(b"not gzip at all")
    failed = _cli("--entry", "9xyz", "--input", str(broken), "--out-npz", str(tmp_path / "9xyz.npz"),
                  "--out-json", str(tmp_path / "9xyz.json"))
    assert failed.returncode == 0 and "9xyz" in failed.stderr
    meta = read_parsed_json(tmp_path / "9xyz.json")
    assert meta["status"] == "failed" and "9xyz" in meta["reason"]
    assert np.load(tmp_path / "9xyz.npz").files == []
    missing = _cli("--entry", "1aki", "--input", str(tmp_path / "none.cif.gz"), "--out-npz", str(tmp_path / "x.npz"),
                   "--out-json", str(tmp_path / "x.json"))
    assert missing.returncode == 2 and not (tmp_path / "x.json").exists()


def _fetch(entry: str, source: Path, tmp_path: Path) -> Path:
    """Run the fetch CLI as the workflow does; returns the record path."""
    record = tmp_path / "raw" / f"{entry}.json"
    result = subprocess.run([sys.executable, "-m", "foldworks.fetch", "--entry", entry, "--source", str(source),
                             "--out", str(tmp_path / "raw" / f"{entry}.cif.gz"), "--record", str(record),
                             "--failures-dir", str(tmp_path / "failures")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return record


def _parse_cli(entry: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return _cli("--entry", entry, "--fetch-record", str(tmp_path / "raw" / f"{entry}.json"),
                "--input", str(tmp_path / "raw" / f"{entry}.cif.gz"), "--out-npz", str(tmp_path / "p" / f"{entry}.npz"),
                "--out-json", str(tmp_path / "p" / f"{entry}.json"), "--failures-dir", str(tmp_path / "failures"))


def test_cli_with_fetch_record_failed_fetch_is_passed_on(pdb_mirror: Path, tmp_path: Path) -> None:
    _fetch("9zzz", pdb_mirror, tmp_path)
    result = _parse_cli("9zzz", tmp_path)
    assert result.returncode == 0 and "entry 9zzz not found" in result.stderr
    meta = read_parsed_json(tmp_path / "p" / "9zzz.json")
    assert (meta["status"], meta["failed_stage"]) == ("failed", "fetch") and "not found at" in meta["reason"]
    assert np.load(tmp_path / "p" / "9zzz.npz").files == []
    assert not (tmp_path / "failures" / "parse").exists()  # recorded once, by fetch


def test_cli_with_fetch_record_checks_the_stored_file(pdb_mirror: Path, tmp_path: Path) -> None:
    _fetch("1crn", pdb_mirror, tmp_path)
    assert _parse_cli("1crn", tmp_path).returncode == 0
    assert read_parsed_json(tmp_path / "p" / "1crn.json")["status"] == "ok"
    raw = tmp_path / "raw" / "1crn.cif.gz"
    raw.write_bytes((pdb_mirror / "1ubq.cif.gz").read_bytes())  # replaced behind the record's back
    assert _parse_cli("1crn", tmp_path).returncode == 0
    meta = read_parsed_json(tmp_path / "p" / "1crn.json")
    assert (meta["status"], meta["failed_stage"]) == ("failed", "parse")
    assert "does not match its fetch record" in meta["reason"] and "--forcerun" in meta["reason"]
    failure = json.loads((tmp_path / "failures" / "parse" / "1crn.json").read_text())
    assert failure["key"] == "1crn" and failure["reason"] == meta["reason"]
    raw.unlink()
    assert _parse_cli("1crn", tmp_path).returncode == 0
    assert "is missing although its fetch record is ok" in read_parsed_json(tmp_path / "p" / "1crn.json")["reason"]
    _fetch("1crn", pdb_mirror, tmp_path)  # refetched: the parse succeeds and its failure record goes
    assert _parse_cli("1crn", tmp_path).returncode == 0
    assert read_parsed_json(tmp_path / "p" / "1crn.json")["status"] == "ok"
    assert not (tmp_path / "failures" / "parse" / "1crn.json").exists()


def test_stage_modules_do_not_import_torch() -> None:
    code = "import sys, foldworks.parse, foldworks.fetch, foldworks.fetch.manifest; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


# ---------------------------------------------------------------- added cleaning behaviours


def test_crystallization_aids_removed_from_diffraction_entries_5kc1(parse) -> None:
    # 5KC1 (X-ray) holds EDO, SO4 and IOD (AF3 crystallisation aids) next to NA/CL/NH4 ions and NO3.
    kept = {(lig["name"], lig["kind"]) for lig in parse("5kc1").ligands}
    assert kept == {("CL", "ion"), ("NA", "ion"), ("NH4", "ion"), ("NO3", "ligand")}
    raw = {lig["name"] for lig in parse("5kc1", remove_crystallization_aids=False).ligands}
    assert {"EDO", "SO4", "IOD"} <= raw


def test_ions_and_ligands_kinds_1hml_6yfy(parse) -> None:
    assert parse("1hml").ligands == [{"chain": "A", "name": "CA", "count": 1, "kind": "ion"},
                                     {"chain": "A", "name": "ZN", "count": 1, "kind": "ion"}]  # SO4 removed
    kinds = {(lig["name"], lig["kind"]) for lig in parse("6yfy").ligands}  # solid-state NMR: no aid removal
    assert ("NAG", "branched") in kinds and ("2PO", "ligand") in kinds


def test_unknown_residue_is_x_with_backbone_kept_5eil(parse, pdb_mirror: Path) -> None:
    # 5EIL position 10 is BP5 (a bipyridyl amino acid without a standard parent) -> X, aatype 20,
    # resolved, and only its N/CA/C/O atoms have atom37 slots.
    st = gemmi.read_structure(str(pdb_mirror / "5eil.cif.gz"))
    assert [r.label_seq for r in st[0]["A"] if r.name == "BP5"] == [10]
    p = parse("5eil")
    a = p.arrays["A"]
    assert _chain(p, "A")["sequence"][9] == "X" and a["aatype"][9] == 20 and a["residue_mask"][9]
    assert sorted(np.nonzero(a["atom_mask"][9])[0].tolist()) == sorted(ATOM_ORDER[n] for n in ("N", "CA", "C", "O"))


def test_phosphotyrosine_maps_to_tyr_without_phosphate_2src(parse, pdb_mirror: Path) -> None:
    st = gemmi.read_structure(str(pdb_mirror / "2src.cif.gz"))
    ptr = [r for r in st[0]["A"] if r.name == "PTR"]
    assert len(ptr) == 1
    i = ptr[0].label_seq - 1
    a = parse("2src").arrays["A"]
    assert _chain(parse("2src"), "A")["sequence"][i] == "Y"
    tyr_atoms = {"N", "CA", "C", "O", "CB", "CG", "CD1", "CD2", "CE1", "CE2", "CZ", "OH"}
    assert {n for n in tyr_atoms if a["atom_mask"][i, ATOM_ORDER[n]]} == tyr_atoms
    assert a["atom_mask"][i].sum() == len(tyr_atoms)  # P, O1P, O2P, O3P have no slot


@pytest.mark.parametrize("cut", ["gzip_stream", "mid_atom_site"])
def test_truncated_real_file_gives_failed_record_1aki(cut: str, pdb_mirror: Path, tmp_path: Path) -> None:
    data = (pdb_mirror / "1aki.cif.gz").read_bytes()
    text = gzip.decompress(data)
    broken = data[: len(data) // 2] if cut == "gzip_stream" else gzip.compress(text[: text.index(b"ATOM   500 ")])
    path = tmp_path / "1aki.cif.gz"
    path.write_bytes(broken)
    p = parse_entry(path, "1aki")
    if cut == "gzip_stream":
        assert p.status == "failed" and p.reason.startswith("entry 1aki: ") and "\n" not in p.reason
    else:  # a cut at a row boundary is still a valid file: fewer residues resolved, never silently full
        assert p.status == "ok" and 0 < _chain(p, "A")["n_resolved"] < 129
