"""The Lambda asset is built without Docker, for arm64 / CPython 3.12, from a cache."""

from __future__ import annotations

from pathlib import Path

import pytest

from sendonce_cdk.bundling import LocalPythonBundling, package_dir
from tests.infra.synthesis import Synthesized

pytestmark = pytest.mark.infra


def _asset_dir(synth: Synthesized) -> Path:
    code = next(iter(synth.of_type("AWS::Lambda::Function").values()))["Properties"]["Code"]
    asset_hash = code["S3Key"].removesuffix(".zip")
    return synth.outdir / f"asset.{asset_hash}"


def test_asset_holds_the_package_and_linux_arm64_wheels(default_assembly: Synthesized) -> None:
    asset = _asset_dir(default_assembly)

    assert (asset / "sendonce" / "__init__.py").is_file()
    assert (asset / "sendonce" / "handlers" / "consumer.py").is_file()
    assert (asset / "aws_lambda_powertools").is_dir()
    native = list((asset / "pydantic_core").glob("*.so"))
    assert native and all("cpython-312-aarch64-linux-gnu" in so.name for so in native)
    assert not list(asset.rglob("__pycache__"))
    assert not (asset / "boto3").exists()  # the Lambda runtime ships its own


def _fake_lambdas(root: Path, requirements: str) -> Path:
    package = root / "site-packages" / "sendonce"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"")
    (package / "requirements.txt").write_text(requirements)
    return package


def test_cache_key_follows_requirements_and_platform(tmp_path: Path) -> None:
    source = _fake_lambdas(tmp_path, "pydantic==2.14.4\n")
    bundler = LocalPythonBundling(source_dir=source, cache_dir=tmp_path / "cache")
    key = bundler.cache_key()

    assert LocalPythonBundling(source_dir=source, cache_dir=tmp_path / "cache").cache_key() == key
    assert LocalPythonBundling(source_dir=source, platform="manylinux2014_x86_64").cache_key() != key
    assert LocalPythonBundling(source_dir=source, python_version="3.13").cache_key() != key
    (source / "requirements.txt").write_text("pydantic==2.14.5\n")
    assert bundler.cache_key() != key


def test_cached_dependencies_are_copied_without_pip(tmp_path: Path) -> None:
    # Given a cache entry for these requirements (pip would fail: the package does not exist)
    source = _fake_lambdas(tmp_path, "no-such-package-sendonce==0.0.0\n")
    bundler = LocalPythonBundling(source_dir=source, cache_dir=tmp_path / "cache")
    cached = tmp_path / "cache" / bundler.cache_key()
    (cached / "dependency").mkdir(parents=True)
    (cached / "dependency" / "__init__.py").write_text("")
    output = tmp_path / "out"
    output.mkdir()

    # When bundling
    assert bundler.try_bundle(str(output)) is True

    # Then the output holds the cached dependencies and the package, without bytecode
    assert (output / "dependency" / "__init__.py").is_file()
    assert (output / "sendonce" / "__init__.py").is_file()
    assert not (output / "sendonce" / "__pycache__").exists()
    assert not (output / "sendonce" / "requirements.txt").exists()


def test_the_lambda_code_is_the_importable_sendonce_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sendonce

    monkeypatch.delenv("SENDONCE_BUNDLE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    bundler = LocalPythonBundling()

    # The package Python imports (lambdas/sendonce here, site-packages from a wheel),
    # with its pins as package data; the cache outside both.
    assert bundler.source_dir == Path(sendonce.__file__).parent
    assert bundler.requirements.read_text() == (package_dir() / "requirements.txt").read_text()
    assert "pydantic==" in bundler.requirements.read_text()
    assert bundler.cache_dir == tmp_path / "sendonce" / "lambda-deps"
    monkeypatch.setenv("SENDONCE_BUNDLE_CACHE", str(tmp_path / "elsewhere"))
    assert LocalPythonBundling().cache_dir == tmp_path / "elsewhere"
