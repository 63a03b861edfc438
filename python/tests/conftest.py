# SPDX-License-Identifier: Apache-2.0
"""pytest options of the dash_attn tests."""


def pytest_addoption(parser):
    parser.addoption("--sweep", choices=("sample", "full", "memcheck"), default=None,
                     help="shape sweep: a sample covering every length (default), the full product, or 18 cases "
                          "with each length once on each side, for compute-sanitizer (also DASH_SWEEP=...)")
    parser.addoption("--long", action="store_true", default=False,
                     help="also run the 1M-token tests (CUDA; a minute of device time)")
