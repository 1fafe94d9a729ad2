# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)
#
# PRIVATE to the collection: may change or disappear in any release.
"""The operator's TLS material (vllm_omni_tls_cert_file, vllm_omni_tls_key_file, vllm_omni_tls_ca_file), read on the
controller before any host changes: deploy's first play and render.yml both refuse what the front door's nginx and
OpenSSL would refuse later, after the engines had already changed.

The files are there, PEM of the right kind and hold no private key where a certificate belongs; the key is the
first certificate's (a chain in the wrong order is named as such); key and signature are strong enough for
OpenSSL 3's default security level; the certificate is valid now, names every router address, and was issued by
the CA file when one is given. Problems with a fix of their own are ``Refusal``s. Never shows key material.
"""

from __future__ import annotations

from pathlib import Path

from ._problems import Refusal

# What each TLS setting's file must hold (PEM): the certificate (chain), a private key, a CA.
TLS_MARKERS = {
    "vllm_omni_tls_cert_file": ("-----BEGIN CERTIFICATE-----", "a PEM certificate"),
    "vllm_omni_tls_key_file": ("PRIVATE KEY-----", "a PEM private key"),
    "vllm_omni_tls_ca_file": ("-----BEGIN CERTIFICATE-----", "a PEM CA certificate"),
}


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
