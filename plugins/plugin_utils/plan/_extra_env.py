# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The environment users may add to every pipeline (``vllm_omni_extra_env``): what it may not set, and where
the values it may set may not point."""

from __future__ import annotations

import re

from ..host import _names
from ._checkers import show
from ._path_checks import inside
from ._pipelines import OWNED_ENV
from ._problems import ALL_HOSTS, Problems

# Environment names that hold secrets: the secrets block of engine.env has its own (API key, HF token),
# and anything else secret-like would sit in a 0644 drop-in, plan.json and the render directory.
SECRET_ENV = frozenset({"VLLM_API_KEY", "XPYD_SIM_REQUIRE_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"})
SECRET_LIKE = re.compile(r"(^|_)(API_?KEY|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?)($|_)")


def check_extra_env(settings: dict, problems: Problems) -> None:
    names = set(settings["vllm_omni_extra_env"])
    secret = sorted(names & SECRET_ENV)
    if secret:
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"sets {', '.join(secret)}, which the collection writes only into each host's 0640 secrets block",
                     "remove it; set vllm_omni_api_key / engine_hf_token in Ansible Vault instead")
        return
    owned = sorted(names & OWNED_ENV.keys())
    if owned:
        controls = sorted({OWNED_ENV[name] for name in owned if OWNED_ENV[name]})
        fixed = [name for name in owned if OWNED_ENV[name] is None]
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"sets {', '.join(owned)}, which the planner computes per pipeline"
                     + (f" ({', '.join(fixed)}: always, to the same value)" if fixed else ""),
                     "remove " + ("it" if len(owned) == 1 else "them")
                     + (f"; set {' / '.join(controls)} instead" if controls else ""))
        return
    caches = sorted(names & MODEL_CACHE_ENV)
    if caches:
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"sets {', '.join(caches)}, which moves where the engines look for model files away from "
                     f"vllm_omni_hf_home ({settings['vllm_omni_hf_home']}): staged weights would not be found "
                     "offline, and the engine unit may write only there",
                     "remove it; set vllm_omni_hf_home to move the model cache")
        return
    for name in sorted(names & LOADER_ENV):
        where = _writable_place(str(settings["vllm_omni_extra_env"][name]), settings)
        if where:
            problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                         f"{name} points into {where}: code or libraries loaded from there can be replaced by "
                         "whoever writes there, or the engine unit never sees them",
                         f"install what {name} loads into a directory root owns (e.g. under "
                         f"{settings['vllm_omni_install_root']}) and point {name} there, or remove it")
            return
    secret_like = sorted(name for name in names if SECRET_LIKE.search(name))
    if secret_like:
        problems.add(ALL_HOSTS, "vllm_omni_extra_env",
                     f"{', '.join(secret_like)} looks like a secret, and extra_env lands in plan.json, the render "
                     "directory and every host's environment file",
                     "keep secrets out of vllm_omni_extra_env; the engines' API key and HF token have their own "
                     "vaulted settings (vllm_omni_api_key, engine_hf_token)")


# Environment that moves the model cache (HF_HOME is the planner's own, from vllm_omni_hf_home).
MODEL_CACHE_ENV = frozenset({"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "TRANSFORMERS_CACHE", "HF_ASSETS_CACHE",
                             "HF_XET_CACHE", "HF_MODULES_CACHE", "VLLM_CACHE_ROOT", "VLLM_ASSETS_CACHE"})
# Environment that makes the engine's interpreter or loader run code from a directory.
LOADER_ENV = frozenset({"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX",
                        "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PATH", "VLLM_PLUGINS_PATH"})
_WORLD_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/user", "/home", "/root")  # noqa: S108 - refused places


def _writable_place(value: str, settings: dict) -> str | None:
    """The first place a search-path value names that the engine user (or anyone) writes, or the unit hides."""
    owned = {_names.ENGINE_HOME: "the engine user's home", settings["vllm_omni_hf_home"]: "the model cache "
             "(vllm_omni_hf_home), which the engine user writes"}
    for part in re.split(r"[: ]+", value):
        if not part:
            continue
        if not part.startswith("/"):
            return f"the relative path {show(part)} (resolved from the engine's working directory)"
        for tree in _WORLD_WRITABLE:
            if inside(part, tree):
                return f"{tree}, which anyone may write or the engine unit hides"
        for tree, what in owned.items():
            if inside(part, tree):
                return f"{tree}, {what}"
    return None
