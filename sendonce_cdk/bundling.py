"""Bundle the Lambda code without Docker, from the installed `sendonce` package.

The Lambda code is the `sendonce` package wherever Python imports it from: `lambdas/`
in a checkout, site-packages once the wheel is installed (it ships in the same wheel as
this construct). Its `requirements.txt` (package data) is installed with pip for the
Lambda platform (manylinux aarch64 wheels, CPython 3.12), then the package is copied
beside it. The installed dependencies are cached in the user's cache directory
(`$SENDONCE_BUNDLE_CACHE`, else `$XDG_CACHE_HOME/sendonce/lambda-deps`, else
`~/.cache/sendonce/lambda-deps`), never inside site-packages or the app, keyed by the
requirements file and the target platform, so only a changed requirements file pays for
pip again.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import aws_cdk as cdk
import jsii
from aws_cdk import aws_lambda as lambda_

LAMBDA_PACKAGE = "sendonce"
REQUIREMENTS = "requirements.txt"
CACHE_ENV = "SENDONCE_BUNDLE_CACHE"

PYTHON_VERSION = "3.12"
PIP_PLATFORM = "manylinux2014_aarch64"
# Bump when the way the bundle is built changes (pip flags, what is copied): it is part
# of both the dependency cache key and the asset hash, so old bundles are not reused.
BUNDLE_FORMAT = "1"
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64

# Never copied into the asset, and left out of its source hash.
EXCLUDE = ["__pycache__", "*.pyc", "*.pyo", ".pytest_cache", "tests"]


def package_dir(package: str = LAMBDA_PACKAGE) -> Path:
    """The directory Python imports `package` from (a checkout's `lambdas/sendonce`, or
    site-packages/sendonce)."""
    root = importlib.resources.files(package)
    if not isinstance(root, Path) or not (root / REQUIREMENTS).is_file():
        raise BundlingError(f"{package!r} is not a package directory with {REQUIREMENTS}: {root}")
    return root


def default_cache_dir() -> Path:
    if explicit := os.environ.get(CACHE_ENV):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "sendonce" / "lambda-deps"


class BundlingError(RuntimeError):
    """The Lambda package was not found, or pip could not install its dependencies for the target platform."""


@jsii.implements(cdk.ILocalBundling)
class LocalPythonBundling:
    """Installs wheels for the Lambda platform with the local pip, never Docker."""

    def __init__(
        self,
        *,
        source_dir: Path | None = None,
        cache_dir: Path | None = None,
        python_version: str = PYTHON_VERSION,
        platform: str = PIP_PLATFORM,
    ) -> None:
        # The package directory itself: it is the asset's source and names the package.
        self.source_dir = source_dir or package_dir()
        self.package = self.source_dir.name
        self.cache_dir = cache_dir or default_cache_dir()
        self.python_version = python_version
        self.platform = platform

    @property
    def requirements(self) -> Path:
        return self.source_dir / REQUIREMENTS

    def cache_key(self) -> str:
        digest = hashlib.sha256()
        digest.update(self.requirements.read_bytes())
        digest.update(f"\0{self.platform}\0cp\0{self.python_version}\0{BUNDLE_FORMAT}".encode())
        return digest.hexdigest()[:32]

    def try_bundle(self, output_dir: str, options: cdk.BundlingOptions | None = None) -> bool:
        dependencies = self.installed_dependencies()
        shutil.copytree(dependencies, output_dir, dirs_exist_ok=True)
        shutil.copytree(
            self.source_dir,
            Path(output_dir) / self.package,
            dirs_exist_ok=True,
            ignore=shutil.ignore_patterns(*EXCLUDE, REQUIREMENTS),
        )
        return True

    def installed_dependencies(self) -> Path:
        """The cached `pip install --target` tree for this requirements file and platform."""
        target = self.cache_dir / self.cache_key()
        if target.is_dir():
            return target
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        # Install beside the final path and rename: a concurrent synth (tests and a
        # deploy at once) sees either no cache entry or a complete one.
        staging = Path(tempfile.mkdtemp(prefix=".installing-", dir=self.cache_dir))
        try:
            command = [
                sys.executable, "-m", "pip", "install",
                "--requirement", str(self.requirements),
                "--target", str(staging),
                "--platform", self.platform,
                "--implementation", "cp",
                "--python-version", self.python_version,
                "--only-binary=:all:",
                "--no-compile",  # the host's .pyc files would not match the Lambda's Python
                "--disable-pip-version-check",
                "--quiet",
            ]  # fmt: skip
            result = subprocess.run(command, capture_output=True, text=True, check=False)
            if result.returncode != 0:
                raise BundlingError(f"pip failed ({result.returncode}): {' '.join(command)}\n{result.stderr.strip()}")
            # Console scripts carry this host's interpreter path: useless in Lambda.
            shutil.rmtree(staging / "bin", ignore_errors=True)
            try:
                os.rename(staging, target)
            except OSError:
                if not target.is_dir():  # lost a race only if the winner finished
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return target


def lambda_code(*, bundler: LocalPythonBundling | None = None) -> lambda_.Code:
    """The `sendonce` package bundled for Lambda, from wherever it is installed.

    The asset hash is the source hash (the package tree, requirements.txt included,
    plus the bundling options), so an unchanged tree skips bundling when its staged
    copy already exists in `cdk.out`.
    """
    bundler = bundler or LocalPythonBundling()
    return lambda_.Code.from_asset(
        str(bundler.source_dir),
        exclude=EXCLUDE,
        asset_hash_type=cdk.AssetHashType.SOURCE,
        bundling=cdk.BundlingOptions(
            # Required by the API, never pulled: `local` always bundles (or raises).
            image=cdk.DockerImage.from_registry("none"),
            local=bundler,
            # Never read by anything: recorded in the asset hash, so a platform or
            # bundle-format change re-bundles even when the package did not change.
            environment={"SENDONCE_BUNDLE": f"{bundler.platform}-cp{bundler.python_version}-v{BUNDLE_FORMAT}"},
        ),
    )
