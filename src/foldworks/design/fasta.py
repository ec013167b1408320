"""ProteinMPNN's design FASTA: a native record, then one record per sampled sequence.

::

    >1ay7, score=1.9876, global_score=1.9876, fixed_chains=['A'], designed_chains=['B'], model_name=v_48_020, seed=37
    DVSGTVCLSALPPEATDTLNLIASDGPFPYSQDGVVFQNRESVLPTQSYGYYHEYTVITPGARTRGTRRIICGEATQEDYYTGDHYATFSLIDQTC
    >T=0.1, sample=1, score=0.9133, global_score=0.9133, seq_recovery=0.4157
    MKSGEVKLEDLPEELKDKLLELAKKGPEPYKSEKGVE...

``score``: mean NLL (nats, temperature 1) over the designed positions (designed chains minus
fixed positions, complete backbone); ``global_score``: over every complete residue;
``seq_recovery``: identity to the native over the designed positions. Sequences hold the
designed chains only, in chain-ID order, separated by ``/``. Floats are written as
ProteinMPNN does (float32, 4 decimals, fixed point).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

_FIELD_RE = re.compile(r"(\w+)=([^,\s]+)")


def fmt(value: float) -> str:
    """ProteinMPNN's float format: ``format_float_positional(float32(x), unique=False, precision=4)``."""
    return np.format_float_positional(np.float32(value), unique=False, precision=4)


def chain_sequence(tokens: Sequence[int], designed: Sequence[bool], chain_starts: Sequence[int],
                   alphabet: str) -> str:
    """Letters of the ``designed`` positions, chains (starting at ``chain_starts``) joined by ``/``."""
    parts, bounds = [], list(chain_starts) + [len(tokens)]
    for start, end in zip(bounds[:-1], bounds[1:]):
        letters = "".join(alphabet[t] for t, d in zip(tokens[start:end], designed[start:end]) if d)
        if letters:
            parts.append(letters)
    return "/".join(parts)


def native_header(name: str, score: float, global_score: float, fixed: Sequence[str], designed: Sequence[str],
                  model_name: str, seed: int) -> str:
    return (f">{name}, score={fmt(score)}, global_score={fmt(global_score)}, fixed_chains={list(fixed)}, "
            f"designed_chains={list(designed)}, model_name={model_name}, seed={seed}")


def sample_header(temperature: float, index: int, score: float, global_score: float, recovery: float) -> str:
    return (f">T={temperature:g}, sample={index}, score={fmt(score)}, global_score={fmt(global_score)}, "
            f"seq_recovery={fmt(recovery)}")


def read_design_fasta(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(native record, samples)``; each record = its header fields + ``sequence``. Raises on a malformed file."""
    records, header, seq = [], None, []
    for line in path.read_text(encoding="utf-8").splitlines() + [">"]:
        if not line.startswith(">"):
            seq.append(line.strip())
            continue
        if header is not None:
            records.append({**dict(_FIELD_RE.findall(header)), "header": header, "sequence": "".join(seq)})
        header, seq = line[1:], []
    samples = [r for r in records[1:] if "sample" in r]
    if not records or not samples:
        raise ValueError(f"{path}: expected a native record and at least one sample record")
    return records[0], samples
