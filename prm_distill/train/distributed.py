"""The distributed pieces of training: the Accelerator (FSDP2 and DeepSpeed on CPU-only hosts too),
and the full model on the main process when the parameters are sharded (FSDP, DeepSpeed ZeRO-3)."""

from __future__ import annotations

import copy
import os

import torch


def make_accelerator(**kwargs):
    """`Accelerator(cpu=<no GPU>, **kwargs)`, with FSDP and DeepSpeed kept on CPU-only hosts.

    accelerate 1.15 drops both there without a word, and the run is plain DDP: AcceleratorState
    turns the launcher's FSDP settings (ACCELERATE_USE_FSDP) into FSDP only for GPU-like process
    groups (MULTI_GPU, MULTI_XPU, ...), not MULTI_CPU, and enables DeepSpeed only when `cpu` is
    False. FSDP2's `fully_shard` works on CPU over gloo, so we switch FSDP on the way
    AcceleratorState does for GPUs; for DeepSpeed we leave `cpu` off and ask for gloo, which
    DeepSpeed's CPU accelerator then uses."""
    from accelerate import Accelerator
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin, InitProcessGroupKwargs

    gpu = torch.cuda.is_available()
    if not gpu and os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        handlers = [*kwargs.pop("kwargs_handlers", []), InitProcessGroupKwargs(backend="gloo")]
        return Accelerator(cpu=False, kwargs_handlers=handlers, **kwargs)
    accelerator = Accelerator(cpu=not gpu, **kwargs)
    wants_fsdp = os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"
    if wants_fsdp and accelerator.distributed_type == DistributedType.MULTI_CPU:
        plugin = FullyShardedDataParallelPlugin()  # from the launcher's FSDP_* environment (FSDP2 here:
        # accelerate refuses FSDP1 without an accelerator while building its own plugin above)
        if accelerator.mixed_precision != "no":
            plugin.set_mixed_precision(accelerator.mixed_precision)
        accelerator.state.fsdp_plugin = plugin
        accelerator.state.distributed_type = DistributedType.FSDP
        PartialState._shared_state["distributed_type"] = DistributedType.FSDP
    return accelerator


def is_sharded(accelerator) -> bool:
    """FSDP or DeepSpeed: the full weights come from `accelerator.get_state_dict` on every rank
    (ZeRO-3 and FSDP gather the shards; ZeRO-2 returns a copy through the same call)."""
    from accelerate.utils import DistributedType

    return accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)


def skeleton(model: torch.nn.Module) -> torch.nn.Module:
    """A copy of the model's structure (LoRA wrappers included) whose parameters are on the meta
    device, so it costs no memory; buffers are copied (rotary tables are not in the state dict).
    Taken before `accelerator.prepare`, it is what the gathered weights are loaded into. Under
    ZeRO-3's zero.Init a parameter is an empty local shard: its full shape is `ds_shape`."""
    memo = {id(p): torch.nn.Parameter(torch.empty(getattr(p, "ds_shape", p.shape), dtype=p.dtype, device="meta"),
                                      requires_grad=p.requires_grad) for p in model.parameters()}
    return copy.deepcopy(model, memo)


def main_process_model(accelerator, model, template: torch.nn.Module) -> tuple[torch.nn.Module | None, bool]:
    """Every rank must call this. The main process gets (a plain module with the current weights,
    whether it is a copy); the others get (None, False).

    Unsharded (one process, DDP): the live unwrapped module, no copy. Sharded (FSDP, ZeRO-3): every
    rank takes part in `accelerator.get_state_dict` (it all-gathers the shards), then the main
    process loads the full weights into a fresh copy of `template`, checking every key."""
    if not is_sharded(accelerator):
        return (accelerator.unwrap_model(model), False) if accelerator.is_main_process else (None, False)
    state = accelerator.get_state_dict(model)  # collective: every rank, not just the main one
    if not accelerator.is_main_process:
        return None, False
    full = skeleton(template)
    full.load_state_dict(state, strict=True, assign=True)
    return full, True
