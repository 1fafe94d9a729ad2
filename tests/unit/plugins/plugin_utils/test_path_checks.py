"""The path checkers: host roots, the model path, and the controller's model directory and TLS files."""

from __future__ import annotations

import pytest
from unitlib import one_host, problems_of

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _path_checks
from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan._checkers import SettingError

ROOT = "vllm_omni_install_root"
MODEL = "vllm_omni_model"
DIRECTORY = "vllm_omni_model_directory"
CERT = "vllm_omni_tls_cert_file"


def refusal(checker, value, name):
    with pytest.raises(SettingError) as caught:
        checker(value, name)
    return caught.value


# --- inside ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "tree", "expected"), [
    ("/opt/vllm", "/opt/vllm", True),
    ("/opt/vllm/venvs", "/opt/vllm", True),
    ("/opt/vllm", "/opt/vl", False),
    ("/opt/vllm-omni", "/opt/vllm", False),
    ("/opt", "/opt/vllm", False),
    ("/anything", "/", True),
    ("/usr/local/x", "/usr/", True),
])
def test_inside_compares_whole_path_components_only(path, tree, expected):
    assert _path_checks.inside(path, tree) is expected


# --- check_abs_path (roots on the hosts) ------------------------------------------------------------


@pytest.mark.parametrize(("value", "normal"), [
    ("/opt/vllm-omni", "/opt/vllm-omni"),
    ("/opt/vllm-omni/", "/opt/vllm-omni"),
    ("/etc/vllm-omni", "/etc/vllm-omni"),
    ("/var/lib/vllm-omni/hf", "/var/lib/vllm-omni/hf"),
    ("/srv/a.b_c-d", "/srv/a.b_c-d"),
    ("/usr/local/vllm-omni", "/usr/local/vllm-omni"),
    ("/tmpfoo", "/tmpfoo"),
    ("/etc/systemdx", "/etc/systemdx"),
])
def test_a_root_of_its_own_is_kept_without_its_trailing_slash(value, normal):
    assert _path_checks.check_abs_path(value, ROOT) == normal


def test_a_root_of_exactly_the_path_length_limit_is_accepted_and_one_more_character_refused():
    longest = "/opt/" + "a" * (_path_checks.PATH_MAX - len("/opt/"))
    assert len(longest) == 255
    assert _path_checks.check_abs_path(longest, ROOT) == longest
    error = refusal(_path_checks.check_abs_path, longest + "a", ROOT)
    assert "is not an absolute path of letters, digits, . _ - / (at most 255 characters)" in error.problem


@pytest.mark.parametrize("value", ["opt/vllm", "relative", "", "/opt/vllm omni", "/opt/vllm$x", "~/vllm", "/"])
def test_a_root_that_is_not_a_plain_absolute_path_is_refused_by_its_characters(value):
    error = refusal(_path_checks.check_abs_path, value, ROOT)
    assert error.problem == f'"{value}" is not an absolute path of letters, digits, . _ - / (at most 255 characters)'
    assert error.fix == 'use only the characters allowed for an absolute path of letters, digits, . _ - / ' \
                        '(at most 255 characters), e.g. "/opt/vllm-omni"'


@pytest.mark.parametrize("value", [None, 5, ["/opt/x"], {"path": "/opt/x"}])
def test_a_root_that_is_not_a_string_is_refused_with_a_quoted_example(value):
    error = refusal(_path_checks.check_abs_path, value, ROOT)
    assert error.problem.startswith("must be a string (an absolute path of letters")
    assert error.fix == f'write it as a quoted string, e.g. {ROOT}: "/opt/vllm-omni"'


@pytest.mark.parametrize("value", ["/opt/../etc", "/opt/vllm/..", "/opt/./vllm", "/opt/vllm/.", "/opt//vllm",
                                   "/opt/vllm//"])
def test_a_root_with_dot_parts_or_double_slashes_is_refused(value):
    error = refusal(_path_checks.check_abs_path, value, ROOT)
    assert error.problem == f"\"{value}\" contains '..', '.' or '//' parts"
    assert error.fix == "write a plain absolute path"


@pytest.mark.parametrize("value", ["/opt", "/opt/", "/srv", "/var/lib", "/usr/local", "/usr/local/", "/etc", "/mnt",
                                   "/home", "/tmp", "/var/tmp", "/var/cache"])
def test_a_root_that_is_a_system_directory_is_refused_because_uninstall_would_remove_it(value):
    error = refusal(_path_checks.check_abs_path, value, ROOT)
    assert error.problem == f'"{value}" is a system directory; uninstall would remove it'
    assert error.fix == "use a directory of its own, e.g. /opt/vllm-omni"


@pytest.mark.parametrize(("value", "tree"), [
    ("/usr/lib/vllm", "/usr"),
    ("/usr/localx/vllm", "/usr"),
    ("/tmp/vllm", "/tmp"),
    ("/var/tmp/vllm", "/var/tmp"),
    ("/home/alice/vllm", "/home"),
    ("/root/vllm", "/root"),
    ("/etc/systemd/vllm", "/etc/systemd"),
    ("/etc/ssh/keys", "/etc/ssh"),
    ("/etc/sudoers.d/x", "/etc/sudoers.d"),
    ("/var/lib/dpkg/vllm", "/var/lib/dpkg"),
    ("/var/log/vllm-omni", "/var/log"),
    ("/run/vllm", "/run"),
    ("/proc/self/root/opt", "/proc"),
])
def test_a_root_in_a_tree_the_system_owns_names_that_tree(value, tree):
    error = refusal(_path_checks.check_abs_path, value, ROOT)
    assert error.problem == f'"{value}" lies in {tree}, which belongs to the system (or is writable by anyone)'
    assert error.fix == "use a directory of its own under /opt, /srv, /var/lib or /etc, e.g. /opt/vllm-omni"


def test_a_root_in_the_system_tree_is_reported_for_the_group_with_the_variable_and_fix():
    lines = problems_of(one_host(vllm_omni_config_root="/etc/systemd/system/vllm"))
    assert lines == ['all hosts (group_vars): vllm_omni_config_root "/etc/systemd/system/vllm" lies in /etc/systemd, '
                     "which belongs to the system (or is writable by anyone) -> use a directory of its own under /opt, "
                     "/srv, /var/lib or /etc, e.g. /opt/vllm-omni"]


# --- check_model (the model on the hosts) -----------------------------------------------------------


@pytest.mark.parametrize("value", ["Qwen/Qwen3-Omni-30B-A3B-Instruct", "org/name.v2", "a/b", "/srv/models/qwen",
                                   "/opt/models/qwen", "/var/lib/vllm-omni/hf/qwen", "/usr/local/models/qwen",
                                   "/mnt/nfs/qwen", "/srv/models/..qwen"])
def test_a_hub_id_or_a_model_directory_of_its_own_is_accepted_unchanged(value):
    assert _path_checks.check_model(value, MODEL) == value


@pytest.mark.parametrize("value", ["Qwen", "Qwen/Qwen3/extra", "-org/name", "org/.hidden", "org/", "/srv/models/qwen/",
                                   "", "org name/x", "/"])
def test_a_model_that_is_neither_a_hub_id_nor_an_absolute_path_is_refused(value):
    error = refusal(_path_checks.check_model, value, MODEL)
    assert error.problem == f'"{value}" is not a Hugging Face id org/name or an absolute path'
    assert error.fix.endswith('e.g. "Qwen/Qwen3-Omni-30B-A3B-Instruct"')


@pytest.mark.parametrize("value", ["/srv/../etc/qwen", "/srv/models/.", "/srv/./models", "/..", "/."])
def test_a_model_path_with_dot_parts_is_refused(value):
    error = refusal(_path_checks.check_model, value, MODEL)
    assert error.problem == f"\"{value}\" contains '..' or '.' parts"
    assert error.fix == "write the model directory's plain absolute path"


@pytest.mark.parametrize(("value", "hidden"), [
    ("/home/alice/qwen", "/home, which the engine unit hides (ProtectHome=yes)"),
    ("/home", "/home, which the engine unit hides (ProtectHome=yes)"),
    ("/root/qwen", "/root, which the engine unit hides (ProtectHome=yes)"),
    ("/run/user/1000/qwen", "/run/user, which the engine unit hides (ProtectHome=yes)"),
    ("/tmp/qwen", "/tmp, which the engine unit replaces with its own empty one (PrivateTmp=yes)"),
    ("/var/tmp/qwen", "/var/tmp, which the engine unit replaces with its own empty one (PrivateTmp=yes)"),
    ("/proc/1/root", "/proc, the kernel's process view (ProtectProc=invisible), not a model directory"),
    ("/sys/qwen", "/sys, the kernel's device view, not a model directory"),
    ("/dev/shm/qwen", "/dev, the device nodes, not a model directory"),
])
def test_a_model_the_engine_sandbox_hides_is_refused_naming_what_hides_it(value, hidden):
    error = refusal(_path_checks.check_model, value, MODEL)
    assert error.problem == f'"{value}" is under {hidden}, so the engine would find it empty or missing'
    assert error.fix.startswith("put the model directory elsewhere (e.g. /srv/models/<name> or under vllm_omni_hf_home)")
    assert error.fix.endswith("or stage it with vllm_omni_model_source")


@pytest.mark.parametrize("value", ["/homes/qwen", "/tmpmodels/qwen", "/devices/qwen", "/rootfs/qwen"])
def test_a_model_beside_a_hidden_tree_is_not_taken_for_inside_it(value):
    assert _path_checks.check_model(value, MODEL) == value


def test_a_model_under_run_but_not_run_user_is_refused_as_a_system_tree_not_as_hidden():
    error = refusal(_path_checks.check_model, "/run/username/qwen", MODEL)
    assert error.problem.startswith('"/run/username/qwen" lies in /run, which belongs to the system')


@pytest.mark.parametrize("value", ["/opt", "/srv", "/var/lib", "/usr/local", "/etc", "/var", "/mnt", "/var/cache"])
def test_a_model_that_is_a_whole_system_directory_is_refused_for_trust_remote_code(value):
    error = refusal(_path_checks.check_model, value, MODEL)
    assert error.problem == (f'"{value}" is a system directory, not a model directory (the engine loads it with '
                             "trust_remote_code: any Python file there runs as the engine)")
    assert error.fix == "point vllm_omni_model at the model's own directory, e.g. /srv/models/<name>"


@pytest.mark.parametrize(("value", "tree"), [
    ("/etc/models/qwen", "/etc"),
    ("/usr/share/qwen", "/usr"),
    ("/boot/qwen", "/boot"),
    ("/var/mail/qwen", "/var/mail"),
    ("/var/lib/systemd/qwen", "/var/lib/systemd"),
    ("/var/lib/vllm-omni-serve/qwen", "/var/lib/vllm-omni-serve"),
    ("/var/lib/dpkg/qwen", "/var/lib/dpkg"),
    ("/run/qwen", "/run"),
])
def test_a_model_in_a_tree_the_system_owns_is_refused_naming_the_tree(value, tree):
    error = refusal(_path_checks.check_model, value, MODEL)
    assert error.problem.startswith(f'"{value}" lies in {tree}, which belongs to the system: the engine loads a model '
                                    "directory with trust_remote_code")
    assert error.fix.startswith("put the model in a directory of its own, e.g. /srv/models/<name>")


def test_a_model_under_etc_is_allowed_for_a_root_but_not_for_the_model():
    """The roots may live in /etc (config_root), a model directory may not: /etc is only in the model's trees."""
    assert _path_checks.check_abs_path("/etc/vllm-omni/models", ROOT) == "/etc/vllm-omni/models"
    with pytest.raises(SettingError, match="lies in /etc,"):
        _path_checks.check_model("/etc/vllm-omni/models", MODEL)


def test_a_hidden_model_is_reported_for_the_group_through_the_planner():
    (line,) = problems_of(one_host(vllm_omni_model="/tmp/qwen"))
    assert line.startswith('all hosts (group_vars): vllm_omni_model "/tmp/qwen" is under /tmp, which the engine unit '
                           "replaces with its own empty one (PrivateTmp=yes)")
    assert " -> put the model directory elsewhere" in line


# --- check_controller_dir (vllm_omni_model_directory) ----------------------------------------------


@pytest.mark.parametrize("value", ["/srv/models/qwen", "/home/alice/models/qwen", "/usr/local/models/qwen",
                                   "/data/hf+cache/qwen@r1", "/opt/models"])
def test_a_controller_model_directory_of_its_own_is_accepted(value):
    assert _path_checks.check_controller_dir(value, DIRECTORY) == value


@pytest.mark.parametrize("value", ["/etc", "/home/alice", "/home/bob.smith", "/root", "/opt", "/srv", "/usr/local",
                                   "/var/lib", "/tmp", "/mnt"])
def test_a_controller_model_directory_that_is_a_whole_system_or_home_directory_is_refused(value):
    error = refusal(_path_checks.check_controller_dir, value, DIRECTORY)
    assert error.problem == (f'"{value}" is a system or home directory as a whole: every file in it would be hashed '
                             "and sent to every engine host")
    assert error.fix == ("point it at the model's own directory, e.g. /srv/models/<name> (a `hf download --local-dir` "
                         "result)")


@pytest.mark.parametrize(("value", "tree"), [
    ("/etc/ssl/models", "/etc"),
    ("/usr/lib/python3", "/usr"),
    ("/proc/self/root/srv/models/qwen", "/proc"),
    ("/var/cache/models", "/var/cache"),
    ("/var/log/models", "/var/log"),
    ("/var/mail/alice", "/var/mail"),
    ("/dev/shm/qwen", "/dev"),
    ("/run/media/qwen", "/run"),
])
def test_a_controller_model_directory_in_a_system_tree_is_refused_naming_the_variable_in_the_fix(value, tree):
    error = refusal(_path_checks.check_controller_dir, value, DIRECTORY)
    assert error.problem.startswith(f'"{value}" lies in {tree}, which belongs to the system (or anyone may write there)')
    assert error.fix == f"copy the model into a directory of its own, e.g. /srv/models/<name>, and point {DIRECTORY} there"


@pytest.mark.parametrize("value", ["/srv/models/qwen/", "/srv/../etc", "/srv//models", "/srv/./models"])
def test_a_controller_model_directory_is_first_held_to_the_plain_file_path_rules(value):
    error = refusal(_path_checks.check_controller_dir, value, DIRECTORY)
    assert error.problem == f"\"{value}\" contains '..', '.' or '//' parts or ends with '/'"


# --- check_controller_file (TLS material) -----------------------------------------------------------


@pytest.mark.parametrize("value", ["/etc/ssl/vllm-omni/router.pem", "/home/alice/certs/a+b@c.key", "/tmp/ca.pem",
                                   "/root/key.pem"])
def test_a_controller_file_is_any_plain_absolute_path_even_in_system_trees(value):
    assert _path_checks.check_controller_file(value, CERT) == value


def test_a_controller_file_may_be_4096_characters_long_but_no_longer():
    longest = "/" + "a" * 4095
    assert _path_checks.check_controller_file(longest, CERT) == longest
    error = refusal(_path_checks.check_controller_file, longest + "a", CERT)
    assert error.problem.endswith("is not an absolute path on the controller of letters, digits, . _ - + @ /")


@pytest.mark.parametrize("value", ["certs/router.pem", "/etc/ssl/router pem", "/etc/ssl/router.pem;rm", "/"])
def test_a_controller_file_with_other_characters_or_relative_is_refused(value):
    error = refusal(_path_checks.check_controller_file, value, CERT)
    assert error.problem == f'"{value}" is not an absolute path on the controller of letters, digits, . _ - + @ /'
    assert error.fix.endswith('e.g. "/etc/ssl/vllm-omni/router.pem"')


@pytest.mark.parametrize("value", ["/etc/ssl/", "/etc/../root/key.pem", "/etc/./ssl/key.pem", "/etc//ssl/key.pem",
                                   "/etc/ssl/.."])
def test_a_controller_file_with_dot_parts_or_a_trailing_slash_is_refused(value):
    error = refusal(_path_checks.check_controller_file, value, CERT)
    assert error.problem == f"\"{value}\" contains '..', '.' or '//' parts or ends with '/'"
    assert error.fix == "write the plain absolute path of the file"


def test_a_controller_file_that_is_not_a_string_is_refused_with_the_variable_in_the_fix():
    error = refusal(_path_checks.check_controller_file, 42, CERT)
    assert error.problem.startswith("must be a string (an absolute path on the controller")
    assert error.problem.endswith("got integer 42")
    assert error.fix == f'write it as a quoted string, e.g. {CERT}: "/etc/ssl/vllm-omni/router.pem"'
