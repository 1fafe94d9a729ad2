"""Is this venv whole? Every file every installed distribution recorded must still exist.

Prints one JSON line: {"missing": N, "examples": [...], "dists": N}. Fast enough for every run
(existence only, no hashing: about 0.5 s for an 8 GB engine venv).
"""

import importlib.metadata
import json
import os

missing, dists = [], 0
for dist in importlib.metadata.distributions():
    dists += 1
    for path in dist.files or []:
        if path.suffix == ".pyc" or "__pycache__" in path.parts:
            continue
        if not os.path.exists(dist.locate_file(path)):
            missing.append(f"{dist.metadata['Name']}: {path}")
print(json.dumps({"missing": len(missing), "examples": missing[:3], "dists": dists}))
