"""The private torch kernel the int8 row products read is still there and still computes the scaled product."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from llama_index_mhop.adapters.torch import has_int8_matmul, int8_matmul  # noqa: E402


def test_int8_matmul_exists_and_matches_a_float_product():
    assert has_int8_matmul()
    rng = np.random.default_rng(0)
    codes = rng.integers(-127, 128, size=(5, 32), dtype=np.int8)
    scales = np.array([0.5, 0.25, 1.0, 0.125, 2.0], dtype=np.float32)  # exact in bfloat16
    query = rng.integers(-4, 5, size=(1, 32)).astype(np.float32)  # small integers: exact in bfloat16
    result = int8_matmul(torch.from_numpy(query).to(torch.bfloat16), torch.from_numpy(codes),
                         torch.from_numpy(scales).to(torch.bfloat16))
    expected = query @ (codes.astype(np.float32) * scales[:, None]).T
    assert tuple(result.shape) == (1, 5)
    np.testing.assert_allclose(result.float().numpy(), expected, rtol=2.0**-8)
