"""The audit harness sees each kind of wait it is meant to catch, and nothing in device-only work."""

from __future__ import annotations

import pytest
import torch

from convinit.speed.fake_cuda import CUDA, audit, fake_cuda


def kinds_of(work) -> list[str]:
    with fake_cuda():
        x = torch.zeros(4, device=CUDA)
        with audit() as recorder:
            work(x)
    return [t.kind for t in recorder.transfers]


@pytest.mark.parametrize(
    "work",
    [
        lambda x: x.new_tensor(3),
        lambda x: torch.tensor([1.0, 2.0], device=x.device),
        lambda x: torch.ones(()).to(x.device),
        lambda x: x.copy_(torch.zeros(4)),
        lambda x: x[torch.tensor([0, 2])],
    ],
    ids=["new_tensor", "tensor_on_device", "cpu_then_to", "copy_from_cpu", "cpu_indices"],
)
def test_blocking_host_to_device_copies_are_recorded(work):
    assert kinds_of(work) == ["h2d"]


@pytest.mark.parametrize(
    "work",
    [
        lambda x: x.sum().item(),
        lambda x: bool(x.sum() > 0),
        lambda x: x.cpu(),
        lambda x: x.tolist(),
        lambda x: torch.equal(x, x),
        lambda x: x.nonzero(),
    ],
    ids=["item", "if_tensor", "cpu", "tolist", "equal", "nonzero"],
)
def test_device_to_host_reads_are_recorded(work):
    assert "read" in kinds_of(work)


def test_a_boolean_mask_index_is_a_read():
    with pytest.raises(Exception):  # noqa: B017 (fake tensors cannot size the result)
        kinds_of(lambda x: x[x > 0])


def test_a_cpu_tensor_where_cuda_refuses_it_is_a_mismatch():
    assert kinds_of(lambda x: torch.stack([x[0], torch.tensor(1.0)])) == ["mismatch"]
    with fake_cuda(), pytest.raises(RuntimeError, match="device"):
        torch.zeros(4, device=CUDA) + torch.zeros(4)


def test_device_only_work_and_host_scalars_in_elementwise_ops_are_not_waits():
    def work(x):
        y = torch.where(x > 0, x, 0.0) * torch.tensor(2.0) + torch.full((), 3.0, device=x.device)
        torch._foreach_lerp_([y], [x], 0.5)
        x.to(x.device)
        torch.zeros(4).to(x.device, non_blocking=True)

    assert kinds_of(work) == ["h2d_async"]


def test_call_sites_point_at_the_line_that_asked():
    with fake_cuda():
        x = torch.zeros(4, device=CUDA)
        with audit() as recorder:
            x.new_tensor(1)
    assert recorder.transfers[0].site.startswith("tests/gpu_path/test_fake_cuda.py:")


def test_bf16_autocast_runs_on_the_fake_device():
    with fake_cuda(), torch.autocast("cuda", dtype=torch.bfloat16):
        out = torch.nn.functional.linear(torch.zeros(2, 3, device=CUDA), torch.zeros(4, 3, device=CUDA))
    assert out.dtype == torch.bfloat16 and out.device == CUDA


def test_setting_a_slice_to_a_python_number_is_a_fill_not_a_copy():
    def work(x):
        m = torch.zeros(2, 2, 3, device=x.device)
        m[:, 0, 0] = m[:, 1, 1] = 1

    assert kinds_of(work) == []


def test_backward_gives_each_leaf_a_gradient_on_its_device():
    with fake_cuda():
        layer = torch.nn.Linear(3, 2).to(CUDA)
        layer(torch.zeros(4, 3, device=CUDA)).sum().backward()
        assert all(p.grad is not None and p.grad.device == CUDA for p in layer.parameters())
