"""status.yml's document: each router's front door certificate, when it expires and the days left."""

from __future__ import annotations

import datetime
import subprocess

import pytest

from ansible_collections.vllm_omni.serve.plugins.plugin_utils import _status

NOW = datetime.datetime(2027, 1, 1, tzinfo=datetime.timezone.utc)


def certificate(tmp_path, days: int) -> str:
    path = tmp_path / f"cert-{days}.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-subj", "/CN=10.0.0.5", "-days", str(days), "-keyout", str(tmp_path / "key.pem"),
                    "-out", str(path)], check=True, capture_output=True)
    return path.read_text()


def plan() -> dict:
    return {"hosts": {}, "worker_urls": [], "backend": {"name": "simulator", "stand_in": True},
            "router": {"per_host": {"edge": {"url": "https://10.0.0.5:8000"}}}}


def test_each_router_shows_its_certificate_expiry_and_days_left(tmp_path):
    pem = certificate(tmp_path, 30)
    now = datetime.datetime.now(datetime.timezone.utc)
    document = _status.status_document(plan(), {}, {}, {"edge": {"health": 200, "workers": [], "certificate": pem}},
                                       now=now)
    [router] = document["routers"]
    assert router["certificate_days_left"] in (29, 30)
    assert router["certificate_expires"].endswith("Z") and document["ok"]
    line = _status.status_table(document)[-2]
    assert f"certificate expires {router['certificate_expires'][:10]} ({router['certificate_days_left']} days left)" in line


def test_an_expired_certificate_makes_the_deployment_not_ok(tmp_path):
    pem = certificate(tmp_path, 1)
    later = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=3)
    document = _status.status_document(plan(), {}, {}, {"edge": {"health": 200, "workers": [], "certificate": pem}},
                                       now=later)
    assert document["routers"][0]["certificate_days_left"] < 0 and not document["ok"]
    assert "certificate EXPIRED" in _status.status_table(document)[-2]


@pytest.mark.parametrize("seen", [{}, {"certificate": ""}, {"certificate": "not a certificate"},
                                  {"certificate": "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n"}])
def test_no_readable_certificate_shows_nothing_and_is_not_a_failure(seen):
    document = _status.status_document(plan(), {}, {}, {"edge": {"health": 200, "workers": [], **seen}}, now=NOW)
    assert document["routers"][0]["certificate_expires"] is None and document["ok"]
    assert "certificate" not in _status.status_table(document)[-2]
