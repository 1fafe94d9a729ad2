"""Secrets checked on the controller: the key's shape, one key everywhere, leaks into the plan, TLS files."""

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.plugin_utils import _secrets

KEY = "abcdefghijklmnopqrstuvwxyz0123456789"


def test_a_good_key_on_every_host_passes_and_problems_never_show_a_value():
    assert _secrets.key_problems({"gpu-a": KEY, "edge": KEY}, required=True) == []
    problems = _secrets.key_problems({"gpu-a": KEY, "edge": KEY[::-1]}, required=True)
    assert len(problems) == 1 and "different API keys (edge; gpu-a)" in problems[0]
    assert KEY not in problems[0] and KEY[::-1] not in problems[0]


def test_each_bad_key_says_why_without_the_value():
    cases = {"tiny-9876": "shorter than 16", KEY + "\n": "newline or space", "x" * 257: "longer than 256",
             KEY + '"': "characters other than"}
    for key, why in cases.items():
        [problem] = _secrets.key_problems({"gpu-a": key}, required=True)
        assert why in problem and key.strip() not in problem, problem
    assert _secrets.key_problems({"gpu-a": None}, required=False) == []
    assert _secrets.key_problems({"gpu-a": None}, required=True) == ["gpu-a (vllm_omni_api_key is not set)"]


def test_a_key_that_reached_the_plan_is_found_with_its_place():
    plan = {"hosts": {"gpu-a": {"pipelines": [{"argv": ["--served-model-name", KEY]}]}}}
    [problem] = _secrets.leaks(plan, {"vllm_omni_api_key": KEY})
    assert "plan.hosts.gpu-a.pipelines[0].argv[1]" in problem and KEY not in problem


def test_tls_files_must_be_there_and_pem_of_their_kind(tmp_path):
    cert, key, other = tmp_path / "server.pem", tmp_path / "server.key", tmp_path / "notes.txt"
    cert.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    key.write_text("-----BEGIN EC PRIVATE KEY-----\nsecret-bytes\n-----END EC PRIVATE KEY-----\n")
    other.write_text("secret-bytes are not a certificate\n")
    ok = {"vllm_omni_tls_cert_file": str(cert), "vllm_omni_tls_key_file": str(key), "vllm_omni_tls_ca_file": None}
    assert _secrets.tls_file_problems(ok) == []
    problems = _secrets.tls_file_problems({"vllm_omni_tls_cert_file": str(key),
                                           "vllm_omni_tls_key_file": str(tmp_path / "missing.key"),
                                           "vllm_omni_tls_ca_file": str(other)})
    assert problems == [
        f"vllm_omni_tls_ca_file names {other}, which does not hold a PEM CA certificate",
        f"vllm_omni_tls_cert_file names {key}, which does not hold a PEM certificate",
        f"vllm_omni_tls_key_file names {tmp_path / 'missing.key'}, which is not a file on the controller",
    ]
    assert not any("secret-bytes" in p for p in problems)
