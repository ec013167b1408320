"""Import foreign model weights into a foldworks checkpoint.

    python -m foldworks.models.import_weights SRC OUT [--format deepmind|openfold] [--preset NAME | --config JSON]
    python -m foldworks.models.import_weights --export-openfold CKPT OUT
    python -m foldworks.models.import_weights --export-deepmind CKPT OUT.npz

Formats are detected from the file name unless ``--format`` is given. ``--preset`` names the
model sizes to check the weights against strictly, ``--config`` a JSON file with them (DeepMind's
model config, a reference case's ``config.json`` or a foldworks AF2 config); without either they
are read from the weights.
``--count PRESET`` prints a preset's parameter count and exits. ``--export-openfold`` and
``--export-deepmind`` write the AF2 weights of a foldworks checkpoint as an OpenFold state dict or
as DeepMind parameters.
"""

from __future__ import annotations

import argparse
import sys

from foldworks.models.weights.errors import WeightsError


def _read_config(path: str):
    """The AF2 config in a JSON file (one-line :class:`WeightsError` when unreadable)."""
    import json

    from foldworks.models.af2.config import config_from_json

    try:
        with open(path, encoding="utf-8") as handle:
            return config_from_json(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise WeightsError(f"{path}: not a usable model config ({exc})") from None


def main(argv: list[str] | None = None) -> int:
    from foldworks.models.af2.config import PRESETS, preset
    from foldworks.models.af2.model import count_parameters
    from foldworks.models.weights.registry import FORMATS, export_deepmind, export_openfold, import_weights

    parser = argparse.ArgumentParser(prog="python -m foldworks.models.import_weights",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("src", nargs="?", help="weights file to import")
    parser.add_argument("out", nargs="?", help="foldworks checkpoint to write")
    parser.add_argument("--format", choices=sorted(FORMATS), help="input format (default: detect)")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="model sizes to check against")
    parser.add_argument("--config", help="JSON file with the model sizes to check against")
    parser.add_argument("--count", metavar="PRESET", choices=sorted(PRESETS), help="print a preset's parameter count")
    parser.add_argument("--export-openfold", action="store_true",
                        help="SRC is a foldworks checkpoint; write OUT as an OpenFold state dict")
    parser.add_argument("--export-deepmind", action="store_true",
                        help="SRC is a foldworks checkpoint; write OUT as DeepMind parameters (.npz)")
    args = parser.parse_args(argv)
    if args.count:
        print(f"{args.count}: {count_parameters(preset(args.count)):,} parameters")
        return 0
    if not args.src or not args.out:
        parser.error("SRC and OUT are required")
    try:
        if args.export_openfold:
            n = export_openfold(args.src, args.out)
            print(f"wrote {args.out}: OpenFold state dict, {n} tensors")
            return 0
        if args.export_deepmind:
            n = export_deepmind(args.src, args.out)
            print(f"wrote {args.out}: DeepMind parameters, {n} arrays")
            return 0
        sizes = args.preset
        if args.config:
            sizes = _read_config(args.config)
        ckpt = import_weights(args.src, args.out, fmt=args.format, preset=sizes)
    except WeightsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    n = sum(v.numel() for v in ckpt["state_dict"].values())
    print(f"wrote {args.out}: {ckpt['source']['format']} → {ckpt['model']}, {len(ckpt['state_dict'])} tensors, "
          f"{n:,} parameters")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
