"""Regenerate (or, with --check, verify) the Python module of the kubelet PodResources API.

    python scripts/gen-podresources.py [--check]

Runs grpcio-tools' protoc on ``exporter/attribution/podresources/v1/api.proto`` with the
repository root as include path. Only the messages are generated, without type stubs (the
client holds them as ``Any``): it calls the one method it uses, ``List``, on the channel
itself (no generated gRPC stub). ``--check`` generates into a temporary directory and exits 1
when the committed file differs (the test suite runs it). The generated code pins its
runtime: keep ``protobuf`` in pyproject.toml at least at the version it names.
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROTO = Path("exporter/attribution/podresources/v1/api.proto")
OUTPUTS = ("api_pb2.py",)


def generate(out_dir: Path) -> None:
    """Write the generated module under ``out_dir`` (mirroring the proto's path)."""
    from grpc_tools import protoc  # noqa: PLC0415 (build-time tool only)

    include = Path(protoc.__file__).parent / "_proto"
    status = protoc.main([
        "protoc",
        f"-I{ROOT}",
        f"-I{include}",
        f"--python_out={out_dir}",
        str(ROOT / PROTO),
    ])
    if status != 0:
        raise SystemExit(f"protoc failed with status {status}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if committed files are stale")
    args = parser.parse_args()
    if not args.check:
        generate(ROOT)
        print("regenerated", ", ".join(str(PROTO.parent / name) for name in OUTPUTS))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(Path(tmp))
        stale = [
            name for name in OUTPUTS
            if not (ROOT / PROTO.parent / name).exists()
            or not filecmp.cmp(Path(tmp) / PROTO.parent / name, ROOT / PROTO.parent / name,
                               shallow=False)
        ]
    if stale:
        print(f"stale generated files: {', '.join(stale)}; run python scripts/gen-podresources.py",
              file=sys.stderr)
        return 1
    print("generated PodResources module is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
