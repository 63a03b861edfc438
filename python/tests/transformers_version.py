# SPDX-License-Identifier: Apache-2.0
"""The installed transformers version, for the tests of dash_attn.integrations.transformers to skip on.

The integration is written against transformers 5.17 (scripts/run-tests.sh installs it); older majors are skipped.
Neither function imports transformers."""
import importlib.util

MIN_MAJOR = 5


def installed_version():
    """transformers' version string, or None when it is not installed (no module, or no package metadata)."""
    if importlib.util.find_spec("transformers") is None:
        return None
    from importlib import metadata
    try:
        return metadata.version("transformers")
    except metadata.PackageNotFoundError:
        return None


def is_supported(version):
    """Whether `version` (from installed_version) is one the integration supports: installed, major >= 5."""
    return version is not None and int(version.split(".")[0]) >= MIN_MAJOR
