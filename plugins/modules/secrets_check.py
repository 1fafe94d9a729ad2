#!/usr/bin/python
# Copyright: contributors to vllm_omni.serve
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: secrets_check
short_description: Check the deployment's secrets on the controller without showing them
version_added: 0.1.0
description:
  - Reads C(vllm_omni_api_key), C(vllm_omni_api_keys) (and C(engine_hf_token)) of the given hosts once, on the
    controller, and checks that the key is an HTTP bearer token of 16-256 characters (no trailing newline or space),
    that every engine host holds the same key, and that no secret value appears anywhere in the plan (which reaches
    argv, environment files, C(plan.json) and the render directory).
  - Also C(vllm_omni_api_keys), the keys clients may send to the front door during a key rotation, a list of at most
    16 such tokens, none twice, the same set on every host, only with a required key and the front door (the plan's
    C(router.frontdoor.enabled)).
  - Every other secret (C(vllm_omni_hf_token), C(engine_hf_token)) of the engine hosts the same way, with its own
    format, and one value for the deployment (set on every engine host or on none, the same everywhere).
  - With the operator's own front door certificate (C(vllm_omni_tls_cert_file)), also that the certificate, key and
    CA files named in the plan are on the controller, readable, and PEM of the right kind; that the key is the
    certificate's, the certificate names every router host's address as an IP subjectAltName, is valid now (one that
    expires within 30 days is warned about) and was issued by C(vllm_omni_tls_ca_file) when that is set.
  - With a controller model directory (C(vllm_omni_model_source=directory)), that it holds a model (C(config.json)
    and weights) and no link out of it other than into a Hugging Face cache.
  - Every problem names hosts and places in the plan, never a value; the result holds no secret.
  - Runs as an action on the controller; there is no module code for hosts.
options:
  hosts:
    description: The hosts whose secrets to check (the engine hosts, and the router hosts behind a front door).
    type: list
    elements: str
    required: true
  engine_hosts:
    description: The engine hosts, whose other secrets (the HF token) to check; default O(hosts).
    type: list
    elements: str
  required:
    description: The API key must be set (C(vllm_omni_api_key_required)).
    type: bool
    default: true
  plan:
    description: The plan to search for secret values (and whose front door TLS files to check).
    type: dict
extends_documentation_fragment:
  - vllm_omni.serve.attributes.read_only
author:
  - vllm_omni.serve contributors (@vllm-omni-serve)
"""

EXAMPLES = r"""
- name: Plan | the secrets, checked without showing them
  vllm_omni.serve.secrets_check:
    hosts: "{{ groups['vllm_omni'] }}"
    required: "{{ vllm_omni_plan.router.api_key_required }}"
    plan: "{{ vllm_omni_plan }}"
  no_log: true
"""

RETURN = r"""
problems:
  description: One line per problem (hosts and plan places; never a value).
  returned: always
  type: list
  elements: str
tls_warnings:
  description: What is legal but soon a problem (a certificate that expires within 30 days); also shown as warnings.
  returned: always
  type: list
  elements: str
"""

from ansible_collections.vllm_omni.serve.plugins.module_utils._action_options import SECRETS_CHECK, controller_only


def main():
    controller_only("secrets_check", SECRETS_CHECK, supports_check_mode=True)


if __name__ == "__main__":
    main()
