"""Test-suite options: `slow` tests run only with --runslow; `gpu` tests only where CUDA is available;
`browser` tests only with --browser (they need `make book` first).

The markers themselves are declared in pyproject.toml ([tool.pytest.ini_options]).
"""

import pytest


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")
    parser.addoption("--browser", action="store_true", default=False,
                     help="run the headless-Chromium tests of the built book (make test does, after make book)")


def pytest_collection_modifyitems(config, items):
    run_slow = config.getoption("--runslow")
    skip_slow = pytest.mark.skip(reason="slow: pass --runslow to run")
    skip_browser = pytest.mark.skip(reason="browser: needs the built book; make test runs these after make book")
    needs_gpu = [item for item in items if "gpu" in item.keywords]
    skip_gpu = None
    if needs_gpu:
        # Imported here so that collecting a suite without gpu tests does not pay for importing torch.
        import torch

        if not torch.cuda.is_available():
            skip_gpu = pytest.mark.skip(reason="gpu: CUDA is not available")
    for item in items:
        if not run_slow and "slow" in item.keywords:
            item.add_marker(skip_slow)
        if not config.getoption("--browser") and "browser" in item.keywords:
            item.add_marker(skip_browser)
        if skip_gpu is not None and item in needs_gpu:
            item.add_marker(skip_gpu)
