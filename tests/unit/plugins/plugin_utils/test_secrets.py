"""Secrets checked on the controller: the key's shape, one key everywhere, leaks into the plan, TLS files."""

from __future__ import annotations

from ansible_collections.vllm_omni.serve.plugins.plugin_utils.plan import _secrets, _tls_material

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
    assert _tls_material.tls_file_problems(ok) == []
    problems = _tls_material.tls_file_problems({"vllm_omni_tls_cert_file": str(key),
                                                "vllm_omni_tls_key_file": str(tmp_path / "missing.key"),
                                                "vllm_omni_tls_ca_file": str(other)})
    assert problems == [
        f"vllm_omni_tls_ca_file names {other}, which does not hold a PEM CA certificate",
        f"vllm_omni_tls_cert_file names {key}, which does not hold a PEM certificate",
        f"vllm_omni_tls_key_file names {tmp_path / 'missing.key'}, which is not a file on the controller",
    ]
    assert not any("secret-bytes" in p for p in problems)


OLD, NEW = "old-key-0123456789abcdef", "new-key-0123456789abcdef"


def test_a_key_set_for_a_rotation_passes_in_any_order_on_every_host():
    sets = {"gpu-a": [OLD, NEW], "gpu-b": [NEW, OLD], "edge": [OLD, NEW]}
    assert _secrets.key_set_problems(sets, required=True, frontdoor=True) == []
    assert _secrets.key_set_problems({"gpu-a": None, "edge": []}, required=True, frontdoor=True) == []
    assert _secrets.key_set_problems({"gpu-a": None}, required=False, frontdoor=False) == []


def test_each_bad_key_set_says_why_and_where_without_a_value():
    cases = {
        "gpu-a (vllm_omni_api_keys is a str, not a list of keys": NEW,
        "gpu-a (vllm_omni_api_keys[1] ends with a newline or space)": [OLD, NEW + "\n"],
        "gpu-a (vllm_omni_api_keys[0] is shorter than 16 characters)": ["short-key", NEW],
        "gpu-a (vllm_omni_api_keys[1] holds characters other than": [OLD, NEW + '"'],
        "gpu-a (vllm_omni_api_keys[1] is a int, not a string)": [OLD, 12345678901234567],
        "gpu-a (vllm_omni_api_keys[2] repeats an earlier key)": [OLD, NEW, OLD],
        "gpu-a (vllm_omni_api_keys holds 17 keys; at most 16)": [f"{OLD}-{i:02}" for i in range(17)],
        "gpu-a (vllm_omni_api_keys could not be read: KeyError": KeyError("vault_x"),
    }
    for why, keys in cases.items():
        [problem] = _secrets.key_set_problems({"gpu-a": keys}, required=True, frontdoor=True)
        assert problem.startswith(why), problem
        assert OLD not in problem and NEW not in problem, problem


def test_a_key_set_differs_between_hosts_or_lacks_what_checks_it():
    [problem] = _secrets.key_set_problems({"gpu-a": [OLD, NEW], "edge": [OLD]}, required=True, frontdoor=True)
    assert "different vllm_omni_api_keys (edge; gpu-a)" in problem and OLD not in problem
    [problem] = _secrets.key_set_problems({"gpu-a": [OLD, NEW]}, required=False, frontdoor=True)
    assert "vllm_omni_api_key_required is false" in problem
    [problem] = _secrets.key_set_problems({"gpu-a": [OLD, NEW]}, required=True, frontdoor=False)
    assert "needs the front door (vllm_omni_frontdoor_enabled)" in problem


def test_a_key_of_the_set_that_reached_the_plan_is_found_by_its_position():
    plan = {"served_model_name": NEW}
    [problem] = _secrets.leaks(plan, {"vllm_omni_api_keys[1]": NEW})
    assert problem.startswith("the value of vllm_omni_api_keys[1] appears in plan.served_model_name") and NEW not in problem


HF = "hf_abcdefghijklmnopqrstu"


def test_every_other_secret_is_one_well_formed_value_and_never_shown():
    assert _secrets.secret_problems("vllm_omni_hf_token", {"gpu-a": HF, "gpu-b": HF}) == []
    assert _secrets.secret_problems("vllm_omni_hf_token", {"gpu-a": None, "gpu-b": ""}) == []
    for value, why in {HF + "\n": "ends with a newline", " " + HF: "starts with a space", "hf_x": "shorter than 8",
                       "hf_a b_cdefghij": "characters other than", "x" * 300: "longer than 256"}.items():
        [problem] = _secrets.secret_problems("vllm_omni_hf_token", {"gpu-a": value})
        assert why in problem and value.strip() not in problem, problem
    [problem] = _secrets.secret_problems("vllm_omni_hf_token", {"gpu-a": HF, "gpu-b": None})
    assert "set on gpu-a but not on gpu-b" in problem and HF not in problem
    [problem] = _secrets.secret_problems("vllm_omni_hf_token", {"gpu-a": HF, "gpu-b": HF[::-1]})
    assert "different values of vllm_omni_hf_token (gpu-a; gpu-b)" in problem


def _pair(tmp_path, days_left: int, sans=("10.0.0.1",)):
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "router")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=10))
            .not_valid_after(now + datetime.timedelta(days=days_left))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(a)) for a in sans]),
                           critical=False).sign(key, hashes.SHA256()))
    (tmp_path / "c.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (tmp_path / "k.pem").write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                       serialization.NoEncryption()))
    return str(tmp_path / "c.pem"), str(tmp_path / "k.pem")


def test_tls_material_good_soon_expiring_and_missing_a_router(tmp_path):
    cert, key = _pair(tmp_path, 400)
    assert _tls_material.tls_material_problems(cert, key, None, {"r1": "10.0.0.1"}) == ([], [])
    cert, key = _pair(tmp_path, 5, sans=("10.0.0.1",))
    problems, warnings = _tls_material.tls_material_problems(cert, key, None, {"r1": "10.0.0.1", "r2": "10.0.0.2"})
    assert problems == [f"vllm_omni_tls_cert_file ({cert}) does not name r2 10.0.0.2 as an IP subjectAltName: "
                        "clients and the collection's checks connect to each router host by its address"]
    assert len(warnings) == 1 and "expires on" in warnings[0] and "in 4 days" in warnings[0]
    assert "PRIVATE" not in " ".join(problems + warnings)
