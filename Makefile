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
export PYTHONDONTWRITEBYTECODE := 1

INVENTORY ?= inventories/example
OUT ?= render

.PHONY: lock device-payload help tools lab lab-down lab-test demo demo-down molecule molecule-multihost test test-checks test-lab lint unit sanity units galaxy conformance conformance-record engine-data golden-update docs render demo bench build clean

help:
	@echo "make demo        deploy the simulator-backed demo onto the local lab (needs root); make demo-down"
	@echo "make test        lint, ansible-test sanity and units, Galaxy's importer, conformance (real engines),"
	@echo "                 molecule and lab tests; installs what it needs"
	@echo "make unit        the unit tests with the tool venv's pytest (quick; make units runs them under ansible-test)"
	@echo "make render INVENTORY=dir OUT=dir   write the plan and every pipeline's files (controller only)"
	@echo "make docs        regenerate docs/variables.md and the README support matrix"
	@echo "make bench       planner benchmark (docs/benchmarks.md)"
	@echo "make lock        regenerate data/locks/ (every host venv pinned and hashed) after a support-table change"

tools: $(TOOLS)/.complete
$(TOOLS)/.complete: requirements/tools.txt scripts/bootstrap-tools.sh
	scripts/bootstrap-tools.sh $(TOOLS)

# Two chains side by side on CI's 2 cores: the checks that need no lab (ansible-test, Galaxy's
# importer, conformance with the real engines) run in the background while molecule and the lab,
# which spend much of their time waiting on lab machines, stream their output; the checks' output
# follows at the end. Either failing fails. (The lab chain is the long one (one lab by default; two side by side
# with LAB_LANES=2, lab_lanes below), so everything else goes beside it, at nice 10: the checks have slack and take
# the CPU whenever the lab waits on its machines, instead of slowing the chain that decides make test's time.)
# (The recipe's shell runs with -e: each chain's exit status is caught, so a failing check still
# reaches the summary line instead of ending the recipe at the status file it never wrote.)
# On CI (CI set: a clean clone whose caches go with it) the checks chain then removes the engine venvs that
# only conformance boots (8 GB each) and conformance's uv cache (5.5 GB; nothing else reads it): the lab's real-engine tests, later, need 0.26.0's beside two lab hosts'
# 17 GB each, and CI's disk ran out there once. A developer's warm cache is left alone.
# A third job, started before lint, fills the lab's cold caches (tests/lab/warm.py: the Debian 12, 13 and 11 rootfs,
# every wheel set the lab fills, the real engine's 4 GB) beside lint and molecule, where the lab used to stop for
# them module by module; a lab step that reaches one still being filled waits for it. Its failure fails nothing:
# the lab then fills that cache itself.
LAB_ENGINE_VERSIONS := 0.26.0
test: tools
	@warm_log=$$(mktemp); nice -n 10 python tests/lab/warm.py > "$$warm_log" 2>&1 & \
	$(MAKE) --no-print-directory lint || { wait; rm -f "$$warm_log"; exit 2; }; \
	checks_log=$$(mktemp); \
	( checks_rc=0; nice -n 10 $(MAKE) --no-print-directory -k test-checks > "$$checks_log" 2>&1 || checks_rc=$$?; \
	  echo "$$checks_rc" > "$$checks_log.rc"; \
	  if [ -n "$${CI:-}" ]; then rm -rf $(CACHE)/uv-cache; for engine in $(CACHE)/engines/*; do \
	    case " $(LAB_ENGINE_VERSIONS) " in *" $${engine##*/} "*) ;; *) rm -rf "$$engine";; esac; done; fi ) & \
	lab_status=0; $(MAKE) --no-print-directory test-lab || lab_status=$$?; wait; \
	echo "== the lab's caches (tests/lab/warm.py, ran beside molecule):"; cat "$$warm_log"; rm -f "$$warm_log"; \
	echo "== sanity, units, galaxy, conformance (ran beside the lab):"; cat "$$checks_log"; \
	checks_status=$$(cat "$$checks_log.rc"); rm -f "$$checks_log" "$$checks_log.rc"; \
	echo "== molecule, lab: exit $$lab_status; sanity, units, galaxy, conformance: exit $$checks_status"; \
	[ "$$lab_status" -eq 0 ] && [ "$$checks_status" -eq 0 ]

test-checks: sanity units galaxy conformance

# molecule's multihost scenario, then the lab modules (LAB_LANES=2: lane a's, with lane b's beside them from the start).
test-lab: tools
	$(call lab_lanes,$(MAKE) --no-print-directory molecule-multihost &&)

lint: tools
	ruff check .
	yamllint --strict .
	ansible-lint --offline -q
	python scripts/gen_docs.py --check
	python scripts/lock.py --check

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

# Deploys to lab machines beyond molecule: check mode, restarts, removal, uninstall, real-engine install.
# With LAB_LANES=2, two lanes side by side: a deploy keeps about one of CI's two cores busy and the modules wait on their
# machines much of the rest, so lane b's modules run in a second lab (tests/lab/lane.py: its own network
# namespace, the same addresses) beside lane a's. Lane a has the network (test_lab installs ansible-core
# from the index) and everything heavy on disk (the real engine's venvs, the 3 GiB staged model); lane b has
# no route out, so its caches are filled first (tests/lab/warm.py: at once when make test's own warm-up has
# filled them). $(1): what lane a runs before its modules. Lane b's output follows lane a's; either failing
# fails. Free disk before and after (the real-engine tests put an 8.7 GB venv on two lab machines beside the
# conformance engines): a run that ends without space says how much there was.
LAB_PYTEST := python -m pytest -p no:cacheprovider --durations=40 -o testpaths=tests/lab
# test_lab last: its real-engine and installed-tarball tests are the most CPU-hungry and time-bound, and by then
# the checks chain (conformance boots the real engines 57 times) is done and lane b nearly so.
LAB_LANE_A := tests/lab/test_security.py tests/lab/test_multihost.py tests/lab/test_artifacts.py tests/lab/test_lab.py
LAB_LANE_B := tests/lab/test_faults.py tests/lab/test_footprint.py tests/lab/test_sandbox_devices.py
# LAB_LANES=1 (the default until two lanes have passed a clean clone; docs/benchmarks.md "Two lab lanes"): one lab,
# every module in name order, as before the lanes. LAB_LANES=2: the two lanes side by side.
LAB_LANES ?= 1
define lab_lanes
	@df -h --output=target,size,used,avail $(CACHE) | sed 's/^/lab-test disk before: /'
	@if [ "$(LAB_LANES)" = 1 ]; then status=0; { $(1) $(LAB_PYTEST) $(sort $(LAB_LANE_A) $(LAB_LANE_B)); } || status=$$?; \
	  df -h --output=target,size,used,avail $(CACHE) | sed 's/^/lab-test disk after: /' || true; \
	  du -shx $(CACHE)/* 2>/dev/null | sort -h | tail -6 | sed 's/^/lab-test cache: /' || true; exit $$status; fi; \
	b_log=$$(mktemp); \
	( b_status=0; python tests/lab/warm.py > "$$b_log" 2>&1 || \
	    echo "lab lane b: warm.py failed; the lane has no network: a cache it lacks fails its module" >> "$$b_log"; \
	  python tests/lab/lane.py b -- $(LAB_PYTEST) $(LAB_LANE_B) >> "$$b_log" 2>&1 || b_status=$$?; \
	  echo "$$b_status" > "$$b_log.rc" ) & \
	a_status=0; { $(1) $(LAB_PYTEST) $(LAB_LANE_A); } || a_status=$$?; wait; \
	echo "== lab lane b ($(LAB_LANE_B)), ran beside lane a:"; cat "$$b_log"; \
	b_status=$$(cat "$$b_log.rc"); rm -f "$$b_log" "$$b_log.rc"; \
	df -h --output=target,size,used,avail $(CACHE) | sed 's/^/lab-test disk after: /' || true; \
	du -shx $(CACHE)/* 2>/dev/null | sort -h | tail -6 | sed 's/^/lab-test cache: /' || true; \
	echo "== lab lane a: exit $$a_status; lane b: exit $$b_status"; [ "$$a_status" -eq 0 ] && [ "$$b_status" -eq 0 ]
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

# What the real-GPU PD run carries to the device machine (docs/gpu-evidence.md): .device/, git-ignored.
device-payload: tools
	python -c 'import sys; sys.path[:0] = ["tests/conformance", "tests"]; import conftest; conftest.ensure_engine("0.26.0")'
	ENGINE_PYTHON=$(CACHE)/engines/0.26.0/bin/python tests/device/prepare.sh

clean:
	rm -rf render .cache .pytest_cache .ruff_cache
