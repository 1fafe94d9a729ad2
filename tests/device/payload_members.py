"""The device side of a payload's stream (tests/device/build_payload.py): cut its members out, install a whole wheel.

    cat PARTS... | python3 tests/device/payload_members.py MANIFEST DIR     each member to DIR/NAME, sha256-checked
    python3 tests/device/payload_members.py --install WHEEL SITE            unpack a wheel as pip --no-deps --target

Standard library only: it runs with the device's own python3 before anything is installed.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_payload import install_wheel  # the builder's own unpacking, stdlib-only


def cut(manifest: Path, out: Path) -> None:
    document = json.loads(manifest.read_text())
    # A manifest without members (the 0.26.0 payloads before 0.30.0's) is a single xz.
    members = document.get("members") or [{"name": "engine.tar.xz", "offset": 0,
                                          "bytes": sum(p["bytes"] for p in document["parts"]), "sha256": None}]
    stream, position = sys.stdin.buffer, 0
    for member in members:
        if member["offset"] != position:
            sys.exit(f"{manifest}: member {member['name']} at {member['offset']}, the stream is at {position}")
        digest, left = hashlib.sha256(), member["bytes"]
        with (out / member["name"]).open("wb") as dst:
            while left:
                chunk = stream.read(min(left, 1 << 20))
                if not chunk:
                    sys.exit(f"the parts end inside {member['name']} ({left} bytes short)")
                dst.write(chunk)
                digest.update(chunk)
                left -= len(chunk)
        position += member["bytes"]
        if member["sha256"] and digest.hexdigest() != member["sha256"]:
            sys.exit(f"{member['name']}: sha256 {digest.hexdigest()} is not the manifest's {member['sha256']}")
        print(f"{member['name']}: {member['bytes']:,} bytes" + (", sha256 checked" if member["sha256"] else ""))
    if stream.read(1):
        sys.exit("the parts hold more than the manifest's members")


def main(argv: list[str]) -> None:
    if argv[:1] == ["--install"] and len(argv) == 3:
        wheel, site = Path(argv[1]), Path(argv[2])
        dropped = install_wheel(wheel, site)
        print(f"{wheel.name}: installed into {site}" + (f" ({len(dropped)} .data entries left out)" if dropped else ""))
        return
    if len(argv) != 2:
        sys.exit(__doc__)
    cut(Path(argv[0]), Path(argv[1]))


if __name__ == "__main__":
    main(sys.argv[1:])
