# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The checkers of the settings that name a path (``_settings``): absolute, normalised, and never into a tree
the system owns, on the hosts (roots, model directory) and on the controller (cache, TLS files)."""

from __future__ import annotations

import re
from typing import Any

from ._checkers import SettingError, check_str, show

_TMP, _VAR_TMP = "/" + "tmp", "/var/" + "tmp"  # names compared with, never written to
MODEL_PATTERN = r"(/[A-Za-z0-9._-]+)+|[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"

SYSTEM_DIRECTORIES = frozenset((
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/media", "/mnt", "/opt", "/proc",
    "/root", "/run", "/sbin", "/srv", "/sys", _TMP, "/usr", "/usr/local", "/var", "/var/cache", "/var/lib",
    "/var/log", "/var/opt", "/var/spool", _VAR_TMP,
))


# Trees nothing of ours may live in: the OS's programs and libraries (root would run what the engine
# user could replace), world-writable places (anyone could plant a directory first), the package
# manager's and systemd's own state, other users' homes.
PROTECTED_TREES = ("/bin", "/boot", "/dev", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin", "/sys", _TMP,
                   "/usr", _VAR_TMP, "/home", "/root", "/etc/systemd", "/etc/ssh", "/etc/sudoers.d", "/etc/pam.d",
                   "/etc/cron.d", "/var/lib/dpkg", "/var/lib/apt", "/var/lib/rpm", "/var/log", "/var/spool")
ALLOWED_UNDER_PROTECTED = ("/usr/local/",)
PATH_MAX = 255


def inside(path: str, tree: str) -> bool:
    """``path`` is ``tree`` or below it (whole components only: /opt/vllm is not inside /opt/vl)."""
    return path == tree or path.startswith(tree.rstrip("/") + "/")


def check_abs_path(value: Any, name: str) -> str:
    path = check_str(value, name, r"/[A-Za-z0-9._/-]{1,254}", "an absolute path of letters, digits, . _ - / "
                     f"(at most {PATH_MAX} characters)", "/opt/vllm-omni")
    if "/../" in path + "/" or "/./" in path + "/" or "//" in path:
        raise SettingError(f"{show(value)} contains '..', '.' or '//' parts", "write a plain absolute path")
    if path != "/" and path.endswith("/"):
        path = path.rstrip("/")
    if path in SYSTEM_DIRECTORIES:
        raise SettingError(f"{show(value)} is a system directory; uninstall would remove it",
                           "use a directory of its own, e.g. /opt/vllm-omni")
    if any(inside(path, tree) for tree in PROTECTED_TREES) and not path.startswith(ALLOWED_UNDER_PROTECTED):
        tree = next(tree for tree in PROTECTED_TREES if inside(path, tree))
        raise SettingError(f"{show(value)} lies in {tree}, which belongs to the system (or is writable by anyone)",
                           "use a directory of its own under /opt, /srv, /var/lib or /etc, e.g. /opt/vllm-omni")
    return path


def check_model(value: Any, name: str) -> str:
    model = check_str(value, name, MODEL_PATTERN, "a Hugging Face id org/name or an absolute path",
                      "Qwen/Qwen3-Omni-30B-A3B-Instruct")
    # A path names exactly the directory the engine reads: no '..' or '.' parts. (An id's parts start
    # with a letter or digit, so only paths can have them.)
    if model.startswith("/") and ("/../" in model + "/" or "/./" in model + "/"):
        raise SettingError(f"{show(value)} contains '..' or '.' parts", "write the model directory's plain absolute path")
    hidden = next((why for root, why in SANDBOX_HIDDEN.items() if model == root or model.startswith(root + "/")), None)
    if model.startswith("/") and hidden:
        raise SettingError(f"{show(value)} is under {hidden}, so the engine would find it empty or missing",
                           "put the model directory elsewhere (e.g. /srv/models/<name> or under vllm_omni_hf_home), "
                           "or stage it with vllm_omni_model_source")
    if model.startswith("/"):
        path = model.rstrip("/") or "/"
        if path in SYSTEM_DIRECTORIES:
            raise SettingError(f"{show(value)} is a system directory, not a model directory (the engine loads it "
                               "with trust_remote_code: any Python file there runs as the engine)",
                               "point vllm_omni_model at the model's own directory, e.g. /srv/models/<name>")
        tree = next((t for t in MODEL_PROTECTED_TREES if inside(path, t)), None)
        if tree and not path.startswith(ALLOWED_UNDER_PROTECTED):
            raise SettingError(f"{show(value)} lies in {tree}, which belongs to the system: the engine loads a model "
                               "directory with trust_remote_code, so whatever Python file lies there runs as the engine",
                               "put the model in a directory of its own, e.g. /srv/models/<name>, /opt/models/<name> "
                               "or under vllm_omni_hf_home, or stage it with vllm_omni_model_source")
    return model


# Where a model directory may not lie, on the hosts: the roots' protected trees and the system's configuration.
MODEL_PROTECTED_TREES = (*PROTECTED_TREES, "/etc", "/var/lib/dpkg", "/var/mail", "/var/lib/systemd",
                         "/var/lib/vllm-omni-serve")


# On the controller, a model directory (vllm_omni_model_directory) is walked, hashed and sent to every host:
# never the system's trees, nor a home directory, /tmp or /var/tmp as a whole. A directory under /tmp is
# accepted (operators and the tests stage from 0700 directories there): who may write into it is the
# operator's to decide, as for any other directory of theirs.
CONTROLLER_PROTECTED_TREES = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/proc", "/run", "/sbin",
                              "/sys", "/usr", "/var/log", "/var/lib/dpkg", "/var/lib/apt", "/var/lib/rpm", "/var/spool",
                              "/var/cache", "/var/mail")


def check_controller_dir(value: Any, name: str) -> str:
    """A directory on the controller whose every file is sent to the hosts: a plain absolute path of its own."""
    path = check_controller_file(value, name)
    if path in SYSTEM_DIRECTORIES or path in ("/", "/root") or re.fullmatch(r"/home/[^/]+", path):
        raise SettingError(f"{show(value)} is a system or home directory as a whole: every file in it would be hashed "
                           "and sent to every engine host", "point it at the model's own directory, e.g. "
                           "/srv/models/<name> (a `hf download --local-dir` result)")
    tree = next((t for t in CONTROLLER_PROTECTED_TREES if inside(path, t)), None)
    if tree and not path.startswith(ALLOWED_UNDER_PROTECTED):
        raise SettingError(f"{show(value)} lies in {tree}, which belongs to the system (or anyone may write there): "
                           "its files would be sent to every engine host and loaded with trust_remote_code",
                           "copy the model into a directory of its own, e.g. /srv/models/<name>, and point "
                           f"{name} there")
    return path


# Paths the engine unit's sandbox (plan["hardening"]) hides from the engine, and by what.
SANDBOX_HIDDEN = {
    "/home": "/home, which the engine unit hides (ProtectHome=yes)",
    "/root": "/root, which the engine unit hides (ProtectHome=yes)",
    "/run/user": "/run/user, which the engine unit hides (ProtectHome=yes)",
    "/tmp": "/tmp, which the engine unit replaces with its own empty one (PrivateTmp=yes)",  # noqa: S108 - refused
    "/var/tmp": "/var/tmp, which the engine unit replaces with its own empty one (PrivateTmp=yes)",  # noqa: S108
    "/proc": "/proc, the kernel's process view (ProtectProc=invisible), not a model directory",
    "/sys": "/sys, the kernel's device view, not a model directory",
    "/dev": "/dev, the device nodes, not a model directory",
}


def check_controller_file(value: Any, name: str) -> str:
    """A file on the controller (TLS material): an absolute plain path; the host-root rules do not apply."""
    path = check_str(value, name, r"/[A-Za-z0-9._/@+-]{1,4095}", "an absolute path on the controller of letters, "
                     "digits, . _ - + @ /", "/etc/ssl/vllm-omni/router.pem")
    if "/../" in path + "/" or "/./" in path + "/" or "//" in path or path.endswith("/"):
        raise SettingError(f"{show(value)} contains '..', '.' or '//' parts or ends with '/'",
                           "write the plain absolute path of the file")
    return path
