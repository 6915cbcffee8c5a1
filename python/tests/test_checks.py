"""The exported checks (memra_check_*) through the package."""

from __future__ import annotations

import pytest

import memra


def test_kernel_check_needs_cuda(lib_path: str) -> None:
    if memra.cuda_device_count() > 0:
        pytest.skip("a CUDA device is present: the kernel check is memra-kernel-check's job")
    p = memra.kernel_check_default_params()
    p.big = 0
    with pytest.raises(memra.NoDeviceError):
        memra.check_kernels(p)


def test_pipeline_parity_on_cpu(model_path: str, lib_path: str) -> None:
    p = memra.pp_parity_default_params()
    p.devices = b"cpu"
    p.n_prompt, p.n_steps = 4, 4
    r = memra.check_pipeline_parity(model_path, p)
    assert r.pass_ == 1 and r.n_arms >= 2 and r.n_stages == 2
    assert r.arms[0].name == b"serial" and r.arms[0].steps_mismatched == 0


def test_argmax_margin(model_path: str, model: memra.Model) -> None:
    prompt = model.tokenize("The quick brown fox jumps over the lazy dog")
    r = memra.check_argmax_margin(model_path, prompt, window=4)
    assert r.n_tokens == len(prompt) and r.window == 4
    assert memra.margin_verdict_name(r.verdict) != "?"
    assert r.arch == b"qwen3"
    with pytest.raises(memra.RangeError):
        memra.check_argmax_margin(model_path, [model.n_vocab], window=1)
