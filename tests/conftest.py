import os
import tempfile

import pytest
import torch

# Tests never use what an earlier run or session cached, and never wait on the network.
os.environ["RESID_CACHE"] = tempfile.mkdtemp(prefix="resid-test-cache-")
os.environ["HF_HUB_OFFLINE"] = "1"
torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))


@pytest.fixture(scope="session")
def smollm2():
    import resid

    return resid.load("smollm2-135m")
