"""A guard that fails on any host synchronisation inside a block of torch code (the static decode
step must have none: a CUDA graph cannot hold one, and eagerly each one stalls the host).

Two layers, because on a CPU some read-backs never reach torch's dispatcher:
- a TorchDispatchMode failing on the operators that read a tensor's value on the host
  (`aten._local_scalar_dense`: .item(), bool(), int(), float(); `aten.nonzero` and its kin, whose
  output size depends on values; indexing with a boolean mask) and on a copy from a device to
  the host (`aten._to_copy` / `aten.copy_` into a CPU tensor from another device: visible on a GPU);
  and a tensor made from host data (`aten.lift_fresh`: torch.tensor(list), a host-to-device copy
  on a GPU, which a CUDA graph cannot hold either);
- the Python methods that hand a tensor's data to the host without dispatching on a CPU
  (`tolist`, `numpy`, `cpu`) patched to fail while the guard is on.
"""
from __future__ import annotations

import contextlib

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
VALUE_READS = {aten._local_scalar_dense, aten.item, aten.nonzero, aten.nonzero_static,
               aten.masked_select, aten.unique_consecutive, aten._unique2, aten.is_nonzero}


class HostSync(AssertionError):
    """A host synchronisation inside the guarded block."""


def _on_cpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "cpu"


def _off_cpu(x) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type != "cpu"


class NoHostSync(TorchDispatchMode):
    """Inside `with NoHostSync() as guard:` any host synchronisation raises HostSync;
    `guard.ops` lists the operators the block ran (so a test can see the block ran at all)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []
        self._patches = contextlib.ExitStack()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        packet = func.overloadpacket
        if packet in VALUE_READS:
            raise HostSync(f"{func} reads a tensor's value on the host")
        if packet is aten.index and any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8)
                                        for i in (args[1] if len(args) > 1 else ()) if i is not None):
            raise HostSync("indexing with a boolean mask (its size depends on the values)")
        if packet is aten._to_copy and _off_cpu(args[0]) and str(kwargs.get("device", args[0].device)) == "cpu":
            raise HostSync(f"{func}: a copy from {args[0].device} to the host")
        if packet in (aten.lift_fresh, aten.lift_fresh_copy):
            raise HostSync(f"{func}: a tensor made from host data")
        if packet is aten.copy_ and _on_cpu(args[0]) and _off_cpu(args[1]):
            raise HostSync(f"{func}: a copy from {args[1].device} into a host tensor")
        self.ops.append(str(func))
        return func(*args, **kwargs)

    def __enter__(self):
        for name in ("tolist", "numpy", "cpu"):
            def refuse(*_a, _name=name, **_k):
                raise HostSync(f"Tensor.{_name}() hands a tensor's data to the host")
            self._patches.enter_context(_patched(torch.Tensor, name, refuse))
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._patches.close()


@contextlib.contextmanager
def _patched(owner, name, value):
    before = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, before)
