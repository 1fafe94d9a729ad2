# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The secrets, checked on the controller before any host is touched, without ever showing them.

The planner never reads a secret (planning and rendering need no vault password). Before a
deploy, this module gets the secret values once: the API key must be an HTTP bearer token (no
whitespace, no trailing newline from ``echo KEY | ansible-vault encrypt_string``), the same on
every engine host, and no secret value may appear anywhere in the plan, which ends up in argv,
environment files, ``plan.json`` and the render directory. A Jinja value in an ordinary setting
that resolves to the key is caught here. Every answer names hosts and places, never a value.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

API_KEY = re.compile(r"[A-Za-z0-9._~+/=-]{16,256}")
# Shorter values would match ordinary text by chance: not worth searching the plan for.
MIN_SEARCHED = 8


def _fingerprint(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()[:12]


def _read_values(name: str, values: dict[str, object], pattern: re.Pattern, why_not) -> tuple[list, dict, list]:
    """One secret's value on each host, sorted into (problems, {fingerprint: hosts}, hosts where it is unset).
    ``values``: host -> value (None or "": not set; an Exception: could not be read). Never shows a value."""
    problems, seen, unset = [], {}, []
    for host, value in sorted(values.items()):
        if isinstance(value, Exception):
            problems.append(f"{host} ({name} could not be read: {type(value).__name__}; is the vault password given "
                            "and the variable it refers to defined?)")
        elif value is None or value == "":
            unset.append(host)
        elif not isinstance(value, str):
            problems.append(f"{host} ({name} is a {type(value).__name__}, not a string)")
        elif not pattern.fullmatch(value):
            problems.append(f"{host} ({name} {why_not(value)})")
        else:
            seen.setdefault(_fingerprint(value), []).append(host)
    return problems, seen, unset


def key_problems(keys: dict[str, object], required: bool) -> list[str]:
    """``keys``: host -> the key value (None: not set; an Exception: could not be read)."""
    problems, seen, unset = _read_values("vllm_omni_api_key", keys, API_KEY, _why_not_a_key)
    if required and unset and seen:  # set where the engines are, not where the router is: a group_vars file
        holders = sorted(host for hosts in seen.values() for host in hosts)
        problems.append(Refusal(
            f"vllm_omni_api_key is set on {', '.join(holders)[:80]} but not on {', '.join(unset)[:80]}",
            "set vllm_omni_api_key once for every host, in group_vars/all.yml (vaulted): the router hosts outside "
            "group vllm_omni do not read group_vars/vllm_omni.yml"))
    elif required:
        problems += [f"{host} (vllm_omni_api_key is not set)" for host in unset]
    if len(seen) > 1:
        groups = "; ".join(", ".join(hosts) for hosts in seen.values())
        problems.append(f"the engine and router hosts hold different API keys ({groups}): the front door checks a "
                        "client's key and the router sends it on to any pipeline, so they must be one key")
    return problems


MAX_KEYS = 16  # a rotation needs two; a handful of client groups with keys of their own is plenty


def _why_not_a_key(key: str) -> str:
    return ("ends with a newline or space" if key != key.rstrip() else
            "is shorter than 16 characters" if len(key) < 16 else
            "is longer than 256 characters" if len(key) > 256 else
            "holds characters other than A-Z a-z 0-9 . _ ~ + / = -")


def key_set_problems(key_sets: dict[str, object], required: bool, frontdoor: bool) -> list[str]:
    """``vllm_omni_api_keys`` per host: the keys clients may send to the front door (None or []: not set).

    Each entry is a bearer token, none twice, at most MAX_KEYS, and every host holds the same set (in
    any order). The set needs a required key and the front door (nginx checks it; the engines check
    only vllm_omni_api_key, which the door sends on). Problems name hosts and positions, never a value.
    """
    problems, seen, used = [], {}, []
    for host, keys in sorted(key_sets.items()):
        if isinstance(keys, Exception):
            problems.append(f"{host} (vllm_omni_api_keys could not be read: {type(keys).__name__}; is the vault "
                            "password given and the variable it refers to defined?)")
            continue
        if keys is None or keys == []:
            seen.setdefault((), []).append(host)
            continue
        if isinstance(keys, str) or not isinstance(keys, list):
            problems.append(f"{host} (vllm_omni_api_keys is a {type(keys).__name__}, not a list of keys; write "
                            "vllm_omni_api_keys: [<old key>, <new key>], each vaulted)")
            continue
        used.append(host)
        host_problems, fingerprints = _host_key_set(host, keys)
        problems += host_problems
        if fingerprints is not None:
            seen.setdefault(fingerprints, []).append(host)
    if len(seen) > 1:
        groups = "; ".join(", ".join(hosts) for hosts in seen.values())
        problems.append(f"the engine and router hosts hold different vllm_omni_api_keys ({groups}): every front "
                        "door must accept the same keys")
    return problems + _key_set_use_problems(bool(used), required, frontdoor)


def _host_key_set(host: str, keys: list) -> tuple[list[str], tuple | None]:
    """(problems, the set's sorted fingerprints, None when it has a problem) of one host's list of keys."""
    problems = []
    for index, key in enumerate(keys):
        if not isinstance(key, str):
            problems.append(f"{host} (vllm_omni_api_keys[{index}] is a {type(key).__name__}, not a string)")
        elif not API_KEY.fullmatch(key):
            problems.append(f"{host} (vllm_omni_api_keys[{index}] {_why_not_a_key(key)})")
    if problems:
        return problems, None
    if len(keys) > MAX_KEYS:
        return [f"{host} (vllm_omni_api_keys holds {len(keys)} keys; at most {MAX_KEYS})"], None
    fingerprints = [_fingerprint(key) for key in keys]
    twice = [str(i) for i, f in enumerate(fingerprints) if f in fingerprints[:i]]
    if twice:
        return [f"{host} (vllm_omni_api_keys[{', '.join(twice)}] repeats an earlier key)"], None
    return [], tuple(sorted(fingerprints))


def _key_set_use_problems(used: bool, required: bool, frontdoor: bool) -> list[str]:
    """A key set needs a required key and the front door: nothing else checks it."""
    if used and not required:
        return ["vllm_omni_api_keys is set but vllm_omni_api_key_required is false: nothing checks a key; "
                "remove vllm_omni_api_keys or require the key"]
    if used and not frontdoor:
        return ["vllm_omni_api_keys needs the front door (vllm_omni_frontdoor_enabled): without it clients "
                "reach vllm-router, which hands their key to the engines, and an engine checks one key "
                "(vllm_omni_api_key) only"]
    return []


def _places(value, needle: str, path: str = "plan") -> list[str]:
    if isinstance(value, str):
        return [path] if needle in value else []
    if isinstance(value, dict):
        return [p for key, item in value.items() for p in _places(item, needle, f"{path}.{key}")
                + ([f"{path} (a key)"] if isinstance(key, str) and needle in key else [])]
    if isinstance(value, list):
        return [p for index, item in enumerate(value) for p in _places(item, needle, f"{path}[{index}]")]
    return []


def leaks(plan: dict, secrets: dict[str, str]) -> list[str]:
    """Where in the plan a secret value appears (``secrets``: variable name -> value)."""
    found = []
    for name, value in sorted(secrets.items()):
        if isinstance(value, str) and len(value) >= MIN_SEARCHED:
            places = _places(plan, value)
            if places:
                shown = ", ".join(places[:3]) + (f" and {len(places) - 3} more" if len(places) > 3 else "")
                found.append(f"the value of {name} appears in {shown}: it would reach argv, environment files, "
                             "plan.json or the render directory")
    return found


# What each TLS setting's file must hold (PEM): the certificate (chain), a private key, a CA.
TLS_MARKERS = {
    "vllm_omni_tls_cert_file": ("-----BEGIN CERTIFICATE-----", "a PEM certificate"),
    "vllm_omni_tls_key_file": ("PRIVATE KEY-----", "a PEM private key"),
    "vllm_omni_tls_ca_file": ("-----BEGIN CERTIFICATE-----", "a PEM CA certificate"),
}


class Refusal(str):
    """A problem that comes with its own fix (the caller's generic TLS fix would point at the wrong thing)."""

    fix: str

    def __new__(cls, problem: str, fix: str):
        refusal = super().__new__(cls, problem)
        refusal.fix = fix
        return refusal

    def __reduce__(self):  # a result crosses from Ansible's worker to its main process pickled
        return Refusal, (str(self), self.fix)


TLS_FILE_MAX = 1 << 20  # a certificate chain or key is a few KiB; anything this big is the wrong file


def tls_file_problems(paths: dict[str, str | None], read=None) -> list[str]:
    """The operator's TLS files on the controller: there, readable, and PEM of the right kind.

    ``paths``: setting name -> controller path (None: not set). Never shows a file's contents.
    """
    read = read or (lambda path: Path(path).read_bytes())
    problems = []
    for name, path in sorted(paths.items()):
        if path is None:
            continue
        marker, what = TLS_MARKERS[name]
        try:
            if not Path(path).is_file():
                problems.append(f"{name} names {path}, which is not a file on the controller")
                continue
            if Path(path).stat().st_size > TLS_FILE_MAX:
                problems.append(f"{name} names {path}, which is larger than 1 MiB: not {what}")
                continue
            text = read(path).decode("ascii", errors="replace")
        except OSError as error:
            problems.append(f"{name} names {path}, which cannot be read on the controller ({error.strerror})")
            continue
        if marker not in text:
            problems.append(f"{name} names {path}, which does not hold {what}")
        elif name != "vllm_omni_tls_key_file" and "PRIVATE KEY-----" in text:
            problems.append(Refusal(f"{name} names {path}, which also holds a private key: certificates are "
                                    "installed readable by every user of the router host",
                                    f"remove the private key PEM block from {path} and keep the key only in the "
                                    "file vllm_omni_tls_key_file names"))
    return problems


# --- every other secret: one model (format, one value for the deployment, never shown) -----------------

# A Hugging Face token: hf_ and letters/digits in practice; any 8-256 of A-Z a-z 0-9 _ - (a mirror's own tokens).
HF_TOKEN = re.compile(r"[A-Za-z0-9_-]{8,256}")
SECRET_FORMATS = {
    "vllm_omni_hf_token": (HF_TOKEN, "A-Z a-z 0-9 _ -"),
    "engine_hf_token": (HF_TOKEN, "A-Z a-z 0-9 _ -"),
}


def _why_not(value: str, pattern: re.Pattern, alphabet: str) -> str:
    low, high = (int(n) for n in re.search(r"\{(\d+),(\d+)\}", pattern.pattern).groups())
    return ("ends with a newline or space (echo's newline in `echo TOKEN | ansible-vault encrypt_string`?)"
            if value != value.rstrip() else
            "starts with a space or newline" if value != value.lstrip() else
            f"is shorter than {low} characters" if len(value) < low else
            f"is longer than {high} characters" if len(value) > high else
            f"holds characters other than {alphabet}")


def secret_problems(name: str, values: dict[str, object]) -> list[str]:
    """One secret (not the API key, which has its own rules) on the hosts that read it: ``values`` host -> value
    (None or "": not set; an Exception: could not be read). Set everywhere or nowhere, one value, well formed.
    Problems name hosts, never a value."""
    pattern, alphabet = SECRET_FORMATS[name]
    problems, seen, unset = _read_values(name, values, pattern, lambda value: _why_not(value, pattern, alphabet))
    if len(seen) > 1:
        groups = "; ".join(", ".join(hosts) for hosts in seen.values())
        problems.append(f"the hosts hold different values of {name} ({groups}): it is one value for the deployment, "
                        "and only one of them would be used")
    if seen and unset:
        problems.append(f"{name} is set on {', '.join(h for hs in seen.values() for h in hs)[:80]} but not on "
                        f"{', '.join(unset)[:80]}: it is one value for the deployment")
    return problems


# --- the operator's TLS material, read on the controller before any host changes -------------------------

EXPIRY_WARN_DAYS = 30


def _load_x509():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
    except ImportError:  # ansible-core depends on cryptography; a controller without it cannot check
        return None, None
    return x509, serialization


def tls_material_problems(cert_path: str, key_path: str, ca_path: str | None, addresses: dict[str, str],
                          now=None) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the operator's certificate and key: the key is the certificate's, the certificate
    names every router address as an IP subjectAltName, it is valid now (and not about to expire), and it was
    issued by ``ca_path`` when one is given. ``addresses``: router host -> address. Never shows key material."""
    import datetime

    x509, serialization = _load_x509()
    if x509 is None:
        return [], ["the Python package cryptography is missing on the controller: the TLS certificate and key "
                    "were not checked against each other"]
    now = now or datetime.datetime.now(datetime.timezone.utc)
    try:
        certs = x509.load_pem_x509_certificates(Path(cert_path).read_bytes())
    except (OSError, ValueError) as error:
        return [f"vllm_omni_tls_cert_file ({cert_path}) does not parse as a PEM certificate "
                f"({type(error).__name__})"], []
    leaf = certs[0]
    try:
        key = serialization.load_pem_private_key(Path(key_path).read_bytes(), password=None)
    except TypeError:
        return [f"vllm_omni_tls_key_file ({key_path}) is encrypted with a passphrase, which nginx cannot be given"], []
    except (OSError, ValueError, Exception) as error:  # unsupported key types raise UnsupportedAlgorithm
        return [f"vllm_omni_tls_key_file ({key_path}) does not parse as a PEM private key ({type(error).__name__})"], []
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    key_spki = key.public_key().public_bytes(*spki)
    if key_spki != leaf.public_key().public_bytes(*spki):
        if any(cert.public_key().public_bytes(*spki) == key_spki for cert in certs[1:]):
            # The key's certificate is in the file, after a CA or intermediate: only the order is wrong.
            return [Refusal(f"vllm_omni_tls_cert_file ({cert_path}) starts with "
                            f"{leaf.subject.rfc4514_string() or 'another certificate'}, not with the certificate of "
                            "the key in vllm_omni_tls_key_file: nginx sends the first certificate as the server "
                            "certificate", f"reorder {cert_path}: the server certificate first, then its "
                            "intermediates (the CA itself may be left out)")], []
        return [f"vllm_omni_tls_key_file ({key_path}) is not the private key of the certificate in "
                f"vllm_omni_tls_cert_file ({cert_path}): nginx would refuse to start with the pair"], []
    problems = _strength_problems(leaf, key, cert_path)
    validity, warnings = _validity_problems(leaf, cert_path, now)
    problems += validity + _address_problems(x509, leaf, cert_path, addresses)
    if ca_path:
        problems += _issuer_problems(x509, certs, cert_path, ca_path)
    return problems, warnings


# What the router hosts' OpenSSL 3 accepts at its default security level (2, Ubuntu 22.04+ and RHEL 9 raise it to
# refuse less): RSA keys of 2048 bits or more, EC keys on the curves nginx offers by default, signatures by SHA-256 or
# stronger. A weaker certificate installs and nginx starts, and every client handshake fails ("ee key too small",
# "ca md too weak") after the engines were already changed.
RSA_MIN_BITS = 2048
EC_CURVES = ("secp256r1", "secp384r1", "secp521r1")
WEAK_HASHES = ("md5", "sha1")


def _strength_problems(leaf, key, cert_path: str) -> list[str]:
    """The certificate's key and signature against what the router host's OpenSSL accepts."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    fix = ("issue a certificate with an RSA key of 2048 bits or more, or an EC key on P-256 or P-384, signed with "
           "SHA-256, and point vllm_omni_tls_cert_file / vllm_omni_tls_key_file at it; or unset both and let the "
           "collection make them")
    problems = []
    if isinstance(key, rsa.RSAPrivateKey) and key.key_size < RSA_MIN_BITS:
        problems.append(Refusal(f"vllm_omni_tls_cert_file ({cert_path}) has a {key.key_size}-bit RSA key: OpenSSL 3 "
                                f"on the router host refuses keys under {RSA_MIN_BITS} bits at every handshake", fix))
    elif isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name not in EC_CURVES:
        problems.append(Refusal(f"vllm_omni_tls_cert_file ({cert_path}) has an EC key on {key.curve.name}, which nginx "
                                f"does not offer clients (it offers {', '.join(EC_CURVES)})", fix))
    elif not isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey, ed25519.Ed25519PrivateKey,
                              ed448.Ed448PrivateKey)):  # DSA: TLS 1.3 cannot use it, TLS 1.2 clients no longer offer it
        kind = type(key).__name__.strip("_").removesuffix("PrivateKey")
        problems.append(Refusal(f"vllm_omni_tls_cert_file ({cert_path}) has a {kind} key, which TLS clients no "
                                "longer accept", fix))
    algorithm = leaf.signature_hash_algorithm
    if algorithm is not None and algorithm.name in WEAK_HASHES:
        problems.append(Refusal(f"vllm_omni_tls_cert_file ({cert_path}) is signed with {algorithm.name.upper()}, "
                                "which OpenSSL 3 refuses at its default security level", fix))
    return problems


def _validity_problems(leaf, cert_path: str, now) -> tuple[list[str], list[str]]:
    """(problems, warnings) of the certificate's validity period: valid now, and not about to expire."""
    import datetime

    after = leaf.not_valid_after_utc
    before = leaf.not_valid_before_utc
    if after <= now:
        return [f"vllm_omni_tls_cert_file ({cert_path}) expired on {after:%Y-%m-%d}: clients refuse it"], []
    if before > now:
        return [f"vllm_omni_tls_cert_file ({cert_path}) is not valid before {before:%Y-%m-%d %H:%M} UTC: "
                "clients refuse it until then"], []
    if after - now < datetime.timedelta(days=EXPIRY_WARN_DAYS):
        return [], [f"vllm_omni_tls_cert_file ({cert_path}) expires on {after:%Y-%m-%d}, in "
                    f"{(after - now).days} days: renew it (docs/security.md)"]
    return [], []


def _address_problems(x509, leaf, cert_path: str, addresses: dict[str, str]) -> list[str]:
    """The router addresses the certificate does not name as an IP subjectAltName."""
    try:
        names = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        ips = {str(ip) for ip in names.get_values_for_type(x509.IPAddress)}
    except x509.ExtensionNotFound:
        ips = set()
    missing = {host: address for host, address in sorted(addresses.items()) if address not in ips}
    if not missing:
        return []
    shown = ", ".join(f"{host} {address}" for host, address in list(missing.items())[:4])
    return [f"vllm_omni_tls_cert_file ({cert_path}) does not name {shown} as an IP subjectAltName: "
            "clients and the collection's checks connect to each router host by its address"]


def _issuer_problems(x509, certs: list, cert_path: str, ca_path: str) -> list[str]:
    """Whether the leaf was issued by the CA file or an intermediate in the certificate file."""
    try:
        cas = x509.load_pem_x509_certificates(Path(ca_path).read_bytes())
    except (OSError, ValueError) as error:
        return [f"vllm_omni_tls_ca_file ({ca_path}) does not parse as a PEM certificate "
                f"({type(error).__name__})"]
    chain = certs[1:] + cas
    if not any(_issued_by(certs[0], issuer) for issuer in chain):
        return [f"vllm_omni_tls_cert_file ({cert_path}) was not issued by vllm_omni_tls_ca_file "
                f"({ca_path}) or an intermediate in the certificate file: clients that trust that CA "
                "would refuse it"]
    return []


def _issued_by(cert, issuer) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except Exception:  # ValueError, InvalidSignature, TypeError for unsupported key types
        return False
    return True
