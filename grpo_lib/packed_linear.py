r"""The update's products by a weight through oneDNN's packed copies, with gradients.

A linear layer :math:`y = xW^\top + b` costs three products in a training step:

.. math::

    y = x W^\top, \qquad \frac{\partial L}{\partial x} = g W, \qquad
    \frac{\partial L}{\partial W} = g^\top x \qquad (g = \partial L / \partial y)

On a CPU in float32, oneDNN multiplies by a weight copied once into its blocked
layout (:func:`grpo_lib.packing.pack_for_rows`); on some CPUs that is faster than
``torch.matmul`` at this book's shapes, on others slower (chapter 19 measures both;
:func:`grpo_lib.packing.packing_pays` decides per shape on the machine at hand). The
first two products multiply by the weight, so :class:`PackedLinear` gives each
a packed copy (:math:`W` and :math:`W^\top`); the third multiplies two
activations and stays a plain product. The results equal
:func:`torch.nn.functional.linear`'s and its gradients to float32 round-off
(``tests/test_packed_linear.py``).

A packed copy is right only while its weight is unchanged, and the optimizer changes
the weights in place after every step (so can a reader's ``p.data.mul_(0)``, which no
version counter sees). :class:`PackCache` therefore keeps a plain copy beside the
packed ones and compares it with the weight at every use (``torch.equal``, a few
microseconds): a changed weight is packed again, an unchanged one is reused by every
micro-batch of a step.
"""
from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

from .packing import pack_for_rows, packed_product, packing_pays

__all__ = ["PackCache", "PackedLinear", "linear", "PACKS"]


class PackCache:
    """Packed copies of weights ``[N, K]`` (as ``nn.Linear`` stores them): ``(W
    packed, W^T packed)``, made at first use and again whenever the weight has
    changed. Holds at most ``max_bytes`` of copies (three per weight); beyond that,
    wherever packing does not apply (a GPU, bfloat16, a torch without oneDNN) and
    where it does not pay on this machine (:func:`grpo_lib.packing.packing_pays`),
    :meth:`get` returns None and the caller takes the plain product."""

    def __init__(self, max_bytes: int = 256 * 2**20):
        self.max_bytes = max_bytes
        self.entries = WeakIdKeyDictionary()  # weight -> (copy, packed, packed_t)
        self.packed_count = 0  # how many times a weight was (re)packed

    def bytes_held(self) -> int:
        return sum(3 * copy.numel() * copy.element_size()
                   for copy, _, _ in self.entries.values())

    def get(self, weight: Tensor, rows: int) -> tuple[Tensor, Tensor] | None:
        N, K = weight.shape
        if not (packing_pays(rows, K, N) and packing_pays(rows, N, K)):
            return None  # x W^T or g W is as fast plain here
        entry = self.entries.get(weight)
        if entry is not None and torch.equal(entry[0], weight):
            return entry[1], entry[2]
        new_bytes = 3 * weight.numel() * weight.element_size()
        if entry is None and self.bytes_held() + new_bytes > self.max_bytes:
            return None
        with torch.no_grad():
            w = weight.detach()
            packed = pack_for_rows(w.t(), rows)  # x W^T: the layer's own product
            packed_t = pack_for_rows(w, rows)  # g W: the input's gradient
            if packed is None or packed_t is None:
                return None
            self.entries[weight] = (w.clone(), packed, packed_t)
        self.packed_count += 1
        return packed, packed_t


PACKS = PackCache()
"""The cache :func:`linear` uses."""


class PackedLinear(torch.autograd.Function):
    """:math:`xW^\\top + b` whose forward and input-gradient products use packed
    copies of :math:`W`; the weight's gradient :math:`g^\\top x` is a plain product."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor | None,
                packed: Tensor, packed_t: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        ctx.packed_t, ctx.has_bias = packed_t, bias is not None
        y = packed_product(x.reshape(-1, x.shape[-1]), packed)  # [T, N]
        if bias is not None:
            y = y + bias
        return y.view(*x.shape[:-1], -1)

    @staticmethod
    def backward(ctx, g: Tensor):
        (x,) = ctx.saved_tensors
        g2 = g.reshape(-1, g.shape[-1])  # [T, N]
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_x = packed_product(g2.contiguous(), ctx.packed_t).view(x.shape)
        if ctx.needs_input_grad[1]:
            grad_w = g2.t() @ x.reshape(-1, x.shape[-1])  # [N, K]
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_b = g2.sum(0)  # [N]
        return grad_x, grad_w, grad_b, None, None


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear(x, weight, bias)``, with both products by ``weight`` through
    :data:`PACKS`' packed copies where packing applies (float32 on a CPU, outside
    ``torch.autocast``, which picks its own dtype; a non-empty ``x``)."""
    packs = None
    if (x.dtype == weight.dtype == torch.float32 and x.device.type == "cpu"
            and x.numel() > 0 and not torch.is_autocast_enabled("cpu")):
        packs = PACKS.get(weight, rows=x.numel() // x.shape[-1])
    if packs is None:
        return torch.nn.functional.linear(x, weight, bias)
    return PackedLinear.apply(x.contiguous(), weight, bias, *packs)
