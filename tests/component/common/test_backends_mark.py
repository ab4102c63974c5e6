"""The ``backends`` mark's promise (``tests/conftest.py``): a test that touches a store runs on
both store backends, or names beside its mark the mechanism only its backends have — checked
at collection, so a test restricted without a reason never runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

RESTRICTED = {
    "a backends subset": '@pytest.mark.backends("postgres")\ndef test_it(store_backend):\n    pass\n',
    "a backend parametrization": '@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)\n'
                                 'def test_it(backend):\n    pass\n',
    "PostgreSQL asked for directly": "def test_it(database_url):\n    pass\n",
}


def collect(tmp_path: Path, modules: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``pytest --collect-only`` with the tests' conftest as its plugin, over one module per body."""
    paths = []
    for number, body in enumerate(modules.values()):
        paths.append(tmp_path / f"test_shape_{number}.py")
        paths[-1].write_text("import pytest\n\n\n" + body)
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-c", "/dev/null", "--rootdir", str(tmp_path), "-p", "tests.conftest", *map(str, paths)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_a_test_on_one_backend_without_a_reason_is_refused_at_collection(tmp_path: Path) -> None:
    collected = collect(tmp_path, RESTRICTED)
    assert collected.returncode != 0, collected.stdout[-2000:]
    for number, shape in enumerate(RESTRICTED):
        assert f"test_shape_{number}.py::test_it touches a store on" in collected.stdout, (shape, collected.stdout[-3000:])


def test_a_reason_beside_the_mark_lets_it_run_on_one_backend(tmp_path: Path) -> None:
    reason = '@pytest.mark.backends("postgres", reason="LISTEN/NOTIFY")\n'
    given = {shape: reason + body.removeprefix('@pytest.mark.backends("postgres")\n')
             for shape, body in RESTRICTED.items()}
    collected = collect(tmp_path, {**given, "both backends": "def test_it(store_backend):\n    pass\n"})
    assert collected.returncode == 0 and "5 tests collected" in collected.stdout, collected.stdout[-2000:]
