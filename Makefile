# vllm_omni.serve: the two commands a newcomer needs are `make demo` and `make test`.
# Everything large (tool venv, engine venvs, lab rootfs) is cached outside the repo in $(CACHE).
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# One knob for every cache: make, the tests, the lab, the roles' wheelhouse all read VLLM_OMNI_CACHE.
CACHE ?= $(or $(VLLM_OMNI_CACHE),$(HOME)/.cache/vllm-omni-serve)
export VLLM_OMNI_CACHE := $(CACHE)
TOOLS := $(CACHE)/tools-$(shell sha256sum requirements/tools.txt | cut -c1-12)
export PATH := $(TOOLS)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# Bytecode goes to the cache, not beside the sources: nothing is written into the checkout or a venv, and each
# module is compiled once, not in every process. (PYTHONDONTWRITEBYTECODE, used before, made every engine process of
# conformance compile vLLM, torch and transformers from source again: 27-31 CPU-s an import of vLLM-Omni's CLI,
# 14-18 s with bytecode, measured on 0.26.0. Unexported too where the environment sets it, as this machine does.)
export PYTHONPYCACHEPREFIX := $(CACHE)/pycache
unexport PYTHONDONTWRITEBYTECODE

INVENTORY ?= inventories/example
OUT ?= render

.PHONY: lock device-payload help tools lab lab-down lab-test demo demo-down molecule molecule-multihost test test-checks test-lab lint unit sanity units galaxy conformance conformance-preview conformance-record engine-data golden-update docs render demo bench build clean

help:
	@echo "make demo        deploy the simulator-backed demo onto the local lab (needs root); make demo-down"
	@echo "make test        lint, ansible-test sanity and units, Galaxy's importer, conformance (real engines),"
	@echo "                 lab tests; installs what it needs (make molecule: the molecule scenarios)"
	@echo "make unit        the unit tests with the tool venv's pytest (quick; make units runs them under ansible-test)"
	@echo "make render INVENTORY=dir OUT=dir   write the plan and every pipeline's files (controller only)"
	@echo "make docs        regenerate docs/variables.md and the README support matrix"
	@echo "make bench       planner benchmark (docs/benchmarks.md)"
	@echo "make lock        regenerate data/locks/ (every host venv pinned and hashed) after a support-table change"
	@echo "make conformance-preview VERSION=v   probe a pre-release listed in data/support.yml previews (CPU)"

tools: $(TOOLS)/.complete
$(TOOLS)/.complete: requirements/tools.txt scripts/bootstrap-tools.sh
	scripts/bootstrap-tools.sh $(TOOLS)

# make test: the lab chain, the checks chain (test-checks) beside it and the lab's cache filler beside both;
# tests/make_test.sh runs them and tests/README.md says how and why.
LAB_ENGINE_VERSIONS := 0.26.0
test: tools
	@MAKE="$(MAKE)" LAB_ENGINE_VERSIONS="$(LAB_ENGINE_VERSIONS)" tests/make_test.sh

test-checks: lint sanity units galaxy conformance

# The lab modules (lab_lanes below). Molecule's scenarios are not part of it: what multihost proves is proven there
# (its verify playbook runs in test_footprint.py on a fleet with a router host, a Mooncake master and Prometheus;
# a converge=full rerun that changes nothing in test_multihost.py, on a fleet of two platforms), and the 15 minutes
# it took in lane a were the lab's longest step that proved nothing new. `make molecule` runs both scenarios.
test-lab: tools
	$(call lab_lanes,)

lint: tools
	ruff check .
	yamllint --strict .
	ansible-lint --offline -q
	python scripts/gen_docs.py --check
	python scripts/lock.py --check
	python scripts/engine_plugin.py --check

unit: tools
	python -m pytest

# ansible-test from pinned requirements (requirements/ansible-test.txt), without its network bootstrap.
sanity: tools
	scripts/ansible-test.sh $(CACHE)/ansible-test sanity

units: tools
	scripts/ansible-test.sh $(CACHE)/ansible-test units --num-workers 2

# Galaxy's importer on the built tarball (requirements/galaxy-importer.txt); fails on any warning.
galaxy: tools
	scripts/galaxy-import.sh $(CACHE)/galaxy-importer

# Real vLLM-Omni engines (one cached venv per supported version) load and boot every render.
conformance: tools
	python -m pytest -p no:cacheprovider -o testpaths=tests/conformance tests/conformance

# A pre-release probed ahead of support (data/support.yml previews): docs/conformance/preview-$(VERSION).json.
conformance-preview: tools
	python tests/conformance/preview.py $(VERSION)

# Same, and record passing results in docs/conformance/ (the README's support matrix reads them).
conformance-record: tools
	RECORD=1 python -m pytest -p no:cacheprovider tests/conformance
	python scripts/gen_docs.py

# Re-derive data/engines/<version>.yaml from each cached engine venv (review the diff).
engine-data: tools
	for v in $$(python -c 'import sys; sys.path.insert(0, ".collection"); from ansible_collections.vllm_omni.serve.plugins.plugin_utils.host._engine_data import supported_versions; print(*supported_versions())'); do \
	  HF_HUB_OFFLINE=1 $(CACHE)/engines/$$v/bin/python tests/conformance/derive_engine_data.py \
	    $(CACHE)/models/$$v/hub/models--Qwen--Qwen3-Omni-30B-A3B-Instruct/snapshots/conformance > data/engines/$$v.yaml; \
	done

lock: tools
	python scripts/lock.py

golden-update: tools
	VLLM_OMNI_GOLDEN_UPDATE=1 python -m pytest tests/unit/test_golden.py

docs: tools
	python scripts/gen_docs.py

render: tools
	ansible-playbook playbooks/render.yml -i $(INVENTORY) -e vllm_omni_render_dir=$(abspath $(OUT))

bench: tools
	python benchmarks/plan_render.py

build: tools
	rm -rf .cache/build && mkdir -p .cache/build
	ansible-galaxy collection build --force --output-path .cache/build

# The local lab: LAB_HOSTS systemd-nspawn machines (default 3) on bridge vomni-br0; needs root.
LAB_HOSTS ?= 3
lab: tools
	python tests/lab/lab.py up --hosts $(LAB_HOSTS)

lab-down: tools
	python tests/lab/lab.py down

# The main job: 3 lab machines, the simulator-backed deploy, a completion through the router.
demo: tools
	tests/lab/demo.sh

demo-down: tools
	python tests/lab/lab.py down

# Deploys to lab machines: check mode, restarts, removal, uninstall, faults, the real engine's install and start.
# tests/lab/lanes.py runs the modules in LAB_LANES labs side by side: a deploy keeps about one of CI's two cores
# busy and the modules wait on their machines much of the rest. Each lane, when free, takes the longest module
# left that it may run. Lane a (this machine's network; $(1) first) alone has a route out, and takes the modules
# that need one first; lanes b... are labs in
# network namespaces of their own (tests/lab/lane.py: the same names and addresses) that wait, before each module,
# for warm.py's caches of the Debian releases it boots. With LAB_AFTER set (make test: a file the checks chain
# writes when it ends), the real-engine module waits for it: it reads conformance's engine venv and model config,
# and needs the disk that the other engines free on CI. Free disk before and after (the real-engine tests put an 8.7 GB venv on two lab machines):
# a run that ends without space says how much there was.
LAB_PYTEST := python -m pytest -p no:cacheprovider --durations=40 -o testpaths=tests/lab
# LAB_LANES=2, the default since a clean clone passed them whole (docs/benchmarks.md); LAB_LANES=1: one lab. Three
# lanes were tried on a clean clone (2026-12-07): the 2 cores stayed saturated (vmstat: 0% idle throughout) and each
# module took about twice as long as beside one other lane (test_multihost 35:29 against 18:32), so no time was won.
LAB_LANES ?= 2
define lab_lanes
	@df -h --output=target,size,used,avail $(CACHE) | sed 's/^/lab-test disk before: /'
	@status=0; python tests/lab/lanes.py --lanes $(LAB_LANES) $(if $(1),--first "$(1)") \
	  $(if $(LAB_AFTER),--after "$(LAB_AFTER)") -- $(LAB_PYTEST) || status=$$?; \
	df -h --output=target,size,used,avail $(CACHE) | sed 's/^/lab-test disk after: /' || true; \
	du -shx $(CACHE)/* 2>/dev/null | sort -h | tail -6 | sed 's/^/lab-test cache: /' || true; exit $$status
endef

lab-test: tools
	$(call lab_lanes,)

# Molecule scenarios on the lab (delegated driver): default (1 host) and multihost (3 hosts).
# `make test` runs multihost only: default's one host (engines and router together, discovered GPUs) is
# what multihost's engine hosts and the lab's fault tests (router beside the engines) already deploy, and
# the lab chain is make test's critical path.
molecule: tools molecule-multihost
	env -u ANSIBLE_CONFIG molecule test -s default

molecule-multihost: tools
	env -u ANSIBLE_CONFIG molecule test -s multihost

# What the real-GPU PD run carries to the device machine (record/gpu-evidence.md): .device/, git-ignored.
device-payload: tools
	python -c 'import sys; sys.path[:0] = ["tests/conformance", "tests"]; import conftest; conftest.ensure_engine("0.26.0")'
	ENGINE_PYTHON=$(CACHE)/engines/0.26.0/bin/python tests/device/prepare.sh

clean:
	rm -rf render .cache .pytest_cache .ruff_cache
