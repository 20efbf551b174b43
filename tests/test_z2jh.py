"""deploy/config.yaml is a valid Zero to JupyterHub deployment, and sized by the measurements.

Helm validates a deployment's values (the chart's values.yaml with the user's config.yaml merged
over it: maps key by key, lists replaced, null deletes a key) against the chart's
values.schema.yaml before it renders anything. This test does the same offline with the chart's
own files, vendored in deploy/z2jh/ (BSD-3-Clause, deploy/z2jh/LICENSE), so it runs on a fresh clone.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "z2jh"
CONFIG = ROOT / "deploy" / "config.yaml"
SIZING = ROOT / "benchmarks" / "sizing.json"

jsonschema = pytest.importorskip(
    "jsonschema", reason="Z2JH schema check skipped: jsonschema is not installed; "
                         "`.venv/bin/pip install -e '.[dev]'` installs it")


def helm_merge(defaults, override):
    """Helm's coalescing of values: maps merged key by key, anything else replaced, null deletes."""
    if not isinstance(defaults, dict) or not isinstance(override, dict):
        return copy.deepcopy(override)
    out = copy.deepcopy(defaults)
    for key, value in override.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = helm_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _values() -> dict:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    return helm_merge(defaults, yaml.safe_load(CONFIG.read_text()))


def _validator():
    schema = yaml.safe_load((CHART / "values.schema.yaml").read_text())
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    cls.check_schema(schema)
    return cls(schema)


def test_helm_merge_follows_helms_rules():
    merged = helm_merge({"a": {"x": 1, "y": [1, 2]}, "b": 2}, {"a": {"y": [3], "z": 4}, "b": None})
    assert merged == {"a": {"x": 1, "y": [3], "z": 4}}


def test_deploy_config_validates_against_the_charts_schema():
    errors = sorted(_validator().iter_errors(_values()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_the_schema_check_can_fail():
    bad = helm_merge(_values(), {"singleuser": {"memory": {"limit": 2}, "cpuLimit": 1}})
    messages = [e.message for e in _validator().iter_errors(bad)]
    assert any("cpuLimit" in m for m in messages), messages  # an unknown key
    bad = helm_merge(_values(), {"cull": {"timeout": "an hour"}})
    assert list(_validator().iter_errors(bad))


def test_single_user_image_is_the_binder_image_and_pulls_the_course():
    values = _values()
    singleuser = values["singleuser"]
    assert singleuser["image"]["name"].endswith("/posenc-lesson") and singleuser["image"]["tag"]
    assert singleuser["cmd"] == "jupyterhub-singleuser"  # the chart's default, kept
    command = singleuser["lifecycleHooks"]["postStart"]["exec"]["command"]
    assert command[0] == "gitpuller" and len(command) == 4  # nbgitpuller's CLI: repo, branch, folder
    assert "nbgitpuller" in (ROOT / "binder" / "requirements.txt").read_text().split()
    target = command[3]
    assert singleuser["defaultUrl"] == f"/lab/tree/{target}/notebooks/00_welcome.ipynb"
    # the chart's dummy authenticator (any password) is replaced
    assert values["hub"]["config"]["JupyterHub"]["authenticator_class"] != "dummy"


def test_idle_culler_is_on():
    cull = _values()["cull"]
    assert cull["enabled"] is True and 0 < cull["every"] <= cull["timeout"] <= 4 * 3600


def _bytes(quantity: str) -> float:
    """As JupyterHub's ByteSpecification (which KubeSpawner's memory options are) reads it: 1G = 2**30."""
    number, unit = re.fullmatch(r"([0-9.]+)([KMGT])?", str(quantity)).groups()
    return float(number) * {None: 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[unit]


def test_guarantees_and_limits_are_the_measured_sizing():
    if not SIZING.exists():
        pytest.fail("benchmarks/sizing.json is missing: run `.venv/bin/python tools/measure_sizing.py`")
    sizing = json.loads(SIZING.read_text())
    singleuser = _values()["singleuser"]
    k8s = sizing["k8s"]
    assert singleuser["memory"]["guarantee"] == k8s["memory_guarantee"]
    assert singleuser["memory"]["limit"] == k8s["memory_limit"]
    assert float(singleuser["cpu"]["guarantee"]) == k8s["cpu_guarantee"]
    assert float(singleuser["cpu"]["limit"]) == k8s["cpu_limit"]
    # the limit covers the worst measured learner; the guarantee does not exceed the limit
    limit_mib = _bytes(singleuser["memory"]["limit"]) / 2**20
    assert limit_mib >= sizing["peak_per_learner_mib"]
    assert _bytes(singleuser["memory"]["guarantee"]) <= _bytes(singleuser["memory"]["limit"])


def test_readme_quotes_the_measured_sizing():
    sizing = json.loads(SIZING.read_text())
    readme = (ROOT / "docs" / "instructors.md").read_text()
    section = readme.split("**Sizing, measured.**")[1].split("\n## ")[0]
    assert f"**{sizing['memory_per_learner_gib']:g} GiB**" in section
    for n in ("30", "100"):
        assert f"**{sizing['machines_tljh'][n]['memory_gib']:g} GiB** RAM" in section, n
    k8s = sizing["k8s"]
    assert (f"memory guarantee {k8s['memory_guarantee']}, limit {k8s['memory_limit']}; "
            f"CPU guarantee {k8s['cpu_guarantee']:g}, limit {k8s['cpu_limit']:g}") in section
    assert f"sudo tljh-config set limits.memory {k8s['memory_limit']}" in readme
