r"""AdamW with its state in CPU memory, for training on a GPU that the optimizer would
fill.

AdamW keeps two numbers per parameter, the running means of the gradient and of its
square (:math:`m, v`). On a GPU they are as large as the gradients and twice the
weights' size in the same dtype (chapter 16's memory table). :class:`CPUOffloadAdamW`
keeps them in CPU memory, with a float32 *master copy* of every weight next to them:

1. after ``backward``, each gradient is copied to the CPU (as float32);
2. ``torch.optim.AdamW`` updates the float32 masters there;
3. each master is copied back into its device weight (cast to the weight's dtype).

The device then holds only the weights and the gradients: it saves the :math:`2N`
moment numbers of AdamW (:func:`offload_saving`), and pays with two copies per
update and an update computed by the CPU. On a CPU-only machine the state is already
in CPU memory and the class only adds the copies: it exists for GPU training.
"""
from __future__ import annotations

import torch

__all__ = ["CPUOffloadAdamW", "offload_saving"]


class CPUOffloadAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` over float32 CPU copies of ``params`` (one parameter
    group; the keyword arguments are AdamW's). The learning-rate schedulers, the
    gradient clipping on the device weights and ``state_dict`` work as with AdamW."""

    def __init__(self, params, **kwargs):
        params = list(params)
        if any(isinstance(p, dict) for p in params):
            raise ValueError("CPUOffloadAdamW takes one list of parameters, not "
                             "parameter groups.")
        self.device_params = params
        masters = [p.detach().to("cpu", torch.float32, copy=True) for p in params]
        super().__init__(masters, **kwargs)
        self.masters = masters

    def step(self, closure=None):
        """Copy the gradients to the CPU, update the masters, copy them back."""
        loss = closure() if closure is not None else None
        with torch.no_grad():
            for weight, master in zip(self.device_params, self.masters):
                grad = weight.grad
                master.grad = None if grad is None else grad.to("cpu", torch.float32)
            super().step()
            for weight, master in zip(self.device_params, self.masters):
                weight.copy_(master.to(weight.device, weight.dtype))
        return loss

    def zero_grad(self, set_to_none: bool = True):
        """Clear the gradients of the device weights and of the masters."""
        for weight in self.device_params:
            if set_to_none:
                weight.grad = None
            elif weight.grad is not None:
                weight.grad.zero_()
        super().zero_grad(set_to_none=set_to_none)

    def state_dict(self):
        """AdamW's state and the float32 masters: with weights in a lower precision
        (bfloat16) the masters hold bits the device weights lack, and an exact resume
        needs them."""
        state = super().state_dict()
        state["masters"] = [master.detach().clone() for master in self.masters]
        return state

    def load_state_dict(self, state_dict):
        """Load AdamW's state and the float32 masters. A state saved without masters
        takes them from the device weights (a resumed run loads the weights into the
        model first): exact for float32 weights, rounded for lower precisions."""
        state_dict = dict(state_dict)
        masters = state_dict.pop("masters", None)
        if masters is not None and len(masters) != len(self.masters):
            raise ValueError(f"CPUOffloadAdamW: the saved state has {len(masters)} "
                             f"master tensors for {len(self.masters)} parameters; it "
                             "belongs to another model.")
        super().load_state_dict(state_dict)
        if masters is None:
            masters = [weight.detach() for weight in self.device_params]
        with torch.no_grad():
            for master, source in zip(self.masters, masters):
                master.copy_(source.to("cpu", torch.float32))


def offload_saving(num_params: int, dtype: torch.dtype = torch.float32) -> int:
    r"""Bytes of device memory that :class:`CPUOffloadAdamW` frees against
    ``torch.optim.AdamW`` on weights of ``dtype``: the two moments,
    :math:`2 N b` (``torch.optim.AdamW`` keeps them in the weights' dtype)."""
    return 2 * num_params * torch.finfo(dtype).bits // 8
