"""What the profiled run had switched on: numeric-precision flags, autocast, torch.compile, optimizers,
DataLoaders, DDP/FSDP, memory format, CUDA graphs and the training framework. Advice is conditioned on it
(a setting already on is never suggested), so it is read inside the profiled process and written to
inject.json as `config`.

Reading must not change the run. `install()` (at session begin, by the injector) adds observers that only
record and then call through: `torch.amp.autocast.__enter__` (autocast regions are transient: their device
and dtype are seen only when entered), `torch.compile` (its `mode` is not kept on the compiled module) and
`torch.nn.utils.clip_grad_norm_` (its `foreach` is an argument of each call). Everything else is read once,
after the measured window, by `capture()`: backend flags, and the live objects of the process (optimizers,
GradScalers, DataLoaders, DDP/FSDP wrappers, compiled modules, CUDA graphs, convolution weights, Hugging Face
/ Lightning trainers, Hugging Face models that can generate), found by one pass over the garbage collector's
objects, so no user object is wrapped or hooked.

Standard library and torch only (no pandas): it runs inside every profiled process. Framework modules are
looked up in sys.modules, never imported. capture() never raises: a section that fails is named in
`errors`.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import logging
import sys
import warnings
from collections.abc import Callable
from typing import Any

# Instances listed per kind (a script with hundreds of DataLoaders or convs needs no more to be described).
MAX_LISTED = 8
# Convolution modules looked at for their weights' memory format; FSDP units counted (one per block).
MAX_CONVS_CHECKED = 2000
MAX_FSDP_UNITS = 2000
# TrainingArguments fields the advice reads (Hugging Face transformers).
HF_ARGUMENTS = (
    "bf16",
    "fp16",
    "tf32",
    "torch_compile",
    "torch_compile_mode",
    "torch_compile_backend",
    "optim",
    "dataloader_num_workers",
    "dataloader_pin_memory",
    "dataloader_persistent_workers",
    "dataloader_prefetch_factor",
    "gradient_accumulation_steps",
    "per_device_train_batch_size",
    "gradient_checkpointing",
    "ddp_bucket_cap_mb",
    "fsdp",
)

_autocast_entries: dict[tuple[str, str, bool], int] = {}
_compile_calls: list[dict] = []
# Inductor's reasons for running a graph without CUDA graphs under mode="reduce-overhead" (mutated inputs,
# CPU tensors, dynamic shapes): it warns them once a graph on this logger, whatever TORCH_LOGS asks for.
CUDAGRAPHS_LOGGER = "torch._inductor.cudagraph_utils.__cudagraphs"
CUDAGRAPH_SKIP_PREFIX = "skipping cudagraphs"
MAX_SKIP_REASONS = 4
_cudagraph_skip_reasons: list[str] = []
# Inductor's FX graph cache counters: each graph inductor compiles (a training graph's forward and backward
# apart) looks the cache up once, a hit, a miss or a bypass.
FX_GRAPH_CACHE_COUNTERS = ("fxgraph_cache_hit", "fxgraph_cache_miss", "fxgraph_cache_bypass")
# clip_grad_norm_ calls by their foreach argument: {foreach: [calls, most gradients in one call]}.
_clip_calls: dict[bool | None, list[int]] = {}
_installed = False


# ----------------------------------------------------------------------------- observers
def install() -> None:
    """Record autocast entries and torch.compile calls from now on (idempotent). Each observer records its
    arguments and calls the original with the same arguments, returning what it returns."""
    global _installed
    if _installed:
        return
    _installed = True
    import torch
    from torch.amp import autocast_mode

    enter = autocast_mode.autocast.__enter__

    @functools.wraps(enter)
    def observed_enter(self: Any) -> Any:
        _note_autocast(self)
        return enter(self)

    # Dynamo handles torch.autocast inside compiled code by its class, without running __enter__; eager
    # code (and the torch.cuda.amp / torch.cpu.amp subclasses, which call super().__enter__) passes here.
    autocast_mode.autocast.__enter__ = observed_enter
    torch.compile = _observed_compile(torch.compile)
    # The script, HF's Accelerate and Lightning call it through torch.nn.utils (bound at the call, or at an
    # import that comes after this); its defining module keeps the original for torch's own callers.
    torch.nn.utils.clip_grad_norm_ = _observed_clip(torch.nn.utils.clip_grad_norm_)
    logging.getLogger(CUDAGRAPHS_LOGGER).addHandler(_CudagraphSkips())


class _CudagraphSkips(logging.Handler):
    """Keeps the distinct reasons inductor gives for skipping CUDA graphs; adds no output of its own."""

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            message = record.getMessage().strip()
            if (
                message.startswith(CUDAGRAPH_SKIP_PREFIX)
                and message not in _cudagraph_skip_reasons
                and len(_cudagraph_skip_reasons) < MAX_SKIP_REASONS
            ):
                _cudagraph_skip_reasons.append(message[:300])


def _note_autocast(context: Any) -> None:
    # An observer must never break the user's autocast: whatever it cannot read, it leaves unrecorded.
    with contextlib.suppress(Exception):
        key = (
            str(getattr(context, "device", "?")),
            _dtype_name(getattr(context, "fast_dtype", None)),
            bool(getattr(context, "_enabled", True)),
        )
        _autocast_entries[key] = _autocast_entries.get(key, 0) + 1


def _observed_compile(compile_fn: Callable) -> Callable:
    @functools.wraps(compile_fn)
    def observed(*args: Any, **kwargs: Any) -> Any:
        with contextlib.suppress(Exception):
            target = args[0] if args else kwargs.get("model")
            backend = kwargs.get("backend")
            _compile_calls.append(
                {
                    "mode": kwargs.get("mode"),
                    "backend": backend
                    if isinstance(backend, str) or backend is None
                    else getattr(backend, "__name__", type(backend).__name__),
                    "fullgraph": bool(kwargs.get("fullgraph", False)),
                    "dynamic": kwargs.get("dynamic"),
                    "target": None if target is None else type(target).__name__,
                }
            )
        return compile_fn(*args, **kwargs)

    return observed


def _observed_clip(clip_fn: Callable) -> Callable:
    """clip_grad_norm_ recording its foreach argument and how many gradients it clips: with foreach=False it
    launches a norm and a multiply per gradient (kernel_launch's advice reads it). A generator of parameters
    is listed first, as clip_grad_norm_ itself does, and passed on as that list."""

    import torch

    @functools.wraps(clip_fn)
    def observed(parameters: Any, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            # Traced by torch.compile (a compiled step function): recording would break its graph.
            return clip_fn(parameters, *args, **kwargs)
        with contextlib.suppress(Exception):
            if not isinstance(parameters, torch.Tensor):
                parameters = list(parameters)
            count = 1 if isinstance(parameters, torch.Tensor) else len(parameters)
            foreach = kwargs.get("foreach", args[3] if len(args) > 3 else None)
            entry = _clip_calls.setdefault(None if foreach is None else bool(foreach), [0, 0])
            entry[0] += 1
            entry[1] = max(entry[1], count)
        return clip_fn(parameters, *args, **kwargs)

    return observed


def _grad_clipping() -> list[dict]:
    return [
        {"foreach": foreach, "calls": calls, "tensors": tensors}
        for foreach, (calls, tensors) in _clip_calls.items()
    ]


# ----------------------------------------------------------------------------- capture
def capture() -> dict:
    """The run's configuration as plain JSON values (see docs/DESIGN.md, `config`)."""
    errors: list[str] = []
    out: dict[str, Any] = {"observers_installed": _installed}
    instances = _section(errors, "objects", _live_instances, {})
    sections: tuple[tuple[str, Callable[[], Any]], ...] = (
        ("precision", _precision_flags),
        ("autocast", _autocast),
        ("grad_scaler", lambda: _grad_scalers(instances.get("grad_scaler", []))),
        ("compile", lambda: _compile(instances.get("compiled", []))),
        ("optimizers", lambda: _optimizers(instances.get("optimizer", []))),
        ("data_loaders", lambda: _data_loaders(instances.get("data_loader", []))),
        ("distributed", lambda: _distributed(instances)),
        ("channels_last", lambda: _channels_last(instances.get("conv", []))),
        ("cuda_graphs", lambda: {"graphs": len(instances.get("cuda_graph", []))}),
        ("modules", lambda: _modules(instances)),
        ("grad_clipping", _grad_clipping),
        ("generation", lambda: _generation(instances.get("hf_generator", []))),
        ("framework", lambda: _framework(instances)),
    )
    for name, read in sections:
        out[name] = _section(errors, name, read, None)
    out["errors"] = errors
    return out


def _section(errors: list[str], name: str, read: Callable[[], Any], default: Any) -> Any:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore"
            )  # deprecated flag getters warn; reading them is still what we want
            return read()
    except Exception as exc:  # noqa: BLE001 - the report is written whatever a section does
        errors.append(f"{name}: {type(exc).__name__}: {exc}")
        return default


def _dtype_name(dtype: Any) -> str | None:
    return None if dtype is None else str(dtype).replace("torch.", "")


def _plain(value: Any) -> Any:
    """A JSON value: enums and other objects become their string."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(getattr(value, "value", value))


def _precision_flags() -> dict:
    import torch

    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    fp32_precision = torch.get_float32_matmul_precision()
    flags = {
        "float32_matmul_precision": fp32_precision,
        "matmul_allow_tf32": bool(matmul.allow_tf32),
        "matmul_allow_bf16_reduced_precision_reduction": bool(matmul.allow_bf16_reduced_precision_reduction),
        "matmul_allow_fp16_reduced_precision_reduction": bool(matmul.allow_fp16_reduced_precision_reduction),
        "cudnn_enabled": bool(cudnn.enabled),
        "cudnn_allow_tf32": bool(cudnn.allow_tf32),
        "cudnn_benchmark": bool(cudnn.benchmark),
        "cudnn_deterministic": bool(cudnn.deterministic),
        "deterministic_algorithms": bool(torch.are_deterministic_algorithms_enabled()),
    }
    # The fp32_precision API of newer torch ("ieee" | "tf32" | "none" for unset), beside the legacy flags.
    for key, owner in (
        ("matmul_fp32_precision", matmul),
        ("cudnn_conv_fp32_precision", getattr(cudnn, "conv", None)),
    ):
        value = getattr(owner, "fp32_precision", None) if owner is not None else None
        if value is not None:
            flags[key] = str(value)
    flags["tf32_matmul"] = (
        flags["matmul_allow_tf32"]
        or fp32_precision in ("high", "medium")
        or flags.get("matmul_fp32_precision") == "tf32"
    )
    flags["tf32_conv"] = flags["cudnn_allow_tf32"] and flags.get("cudnn_conv_fp32_precision") != "ieee"
    return flags


def _autocast() -> dict:
    regions = [
        {"device": device, "dtype": dtype, "enabled": enabled, "entries": count}
        for (device, dtype, enabled), count in sorted(_autocast_entries.items())
    ]
    enabled = [r for r in regions if r["enabled"]]
    dtypes = sorted({r["dtype"] for r in enabled if r["dtype"]})
    return {"observed": _installed, "regions": regions, "enabled": bool(enabled), "dtypes": dtypes}


def _target_classes() -> dict[str, tuple[type, ...]]:
    """Classes whose live instances describe the run, from modules already imported only."""
    import torch

    targets: dict[str, list[type]] = {
        "optimizer": [torch.optim.Optimizer],
        "grad_scaler": [torch.amp.GradScaler],
        "data_loader": [torch.utils.data.DataLoader],
        "ddp": [torch.nn.parallel.DistributedDataParallel],
        "cuda_graph": [torch.cuda.CUDAGraph],
        "conv": [torch.nn.modules.conv._ConvNd],
    }

    def add(kind: str, module: str, name: str) -> None:
        cls = getattr(sys.modules.get(module), name, None)
        if isinstance(cls, type):
            targets.setdefault(kind, []).append(cls)

    add("compiled", "torch._dynamo.eval_frame", "OptimizedModule")
    add("fsdp", "torch.distributed.fsdp.fully_sharded_data_parallel", "FullyShardedDataParallel")
    add("fsdp", "torch.distributed.fsdp", "FSDPModule")
    add("hf_trainer", "transformers.trainer", "Trainer")
    add("hf_arguments", "transformers.training_args", "TrainingArguments")
    add("hf_generator", "transformers.generation.utils", "GenerationMixin")
    for module in ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer"):
        add("lightning_trainer", module, "Trainer")
    targets["module"] = [torch.nn.Module]  # last: every other kind above that is a module is its own
    return {kind: tuple(classes) for kind, classes in targets.items()}


def _live_instances() -> dict[str, list]:
    """Up to MAX_LISTED live instances per kind (MAX_CONVS_CHECKED convolutions), one pass over gc's objects
    with the kind of each type looked up once."""
    targets = _target_classes()
    caps = {
        kind: MAX_CONVS_CHECKED
        if kind in ("conv", "module")
        else MAX_FSDP_UNITS
        if kind == "fsdp"
        else MAX_LISTED
        for kind in targets
    }
    found: dict[str, list] = {kind: [] for kind in targets}
    kind_of: dict[type, str | None] = {}
    for obj in gc.get_objects():
        cls = type(obj)
        if cls not in kind_of:
            kind_of[cls] = _kind_of(cls, targets)
        kind = kind_of[cls]
        if kind is not None and len(found[kind]) < caps[kind]:
            found[kind].append(obj)
    return found


def _kind_of(cls: type, targets: dict[str, tuple[type, ...]]) -> str | None:
    # A metaclass's __subclasscheck__ may raise for an odd type; such a type is none of ours.
    try:
        return next((kind for kind, classes in targets.items() if issubclass(cls, classes)), None)
    except Exception:  # noqa: BLE001
        return None


def _modules(instances: dict[str, list]) -> dict:
    """Whether the process holds an nn.Module with parameters: a raw tensor loop builds none, and
    torch.compile(model) is then no change it can make (raw_elementwise_loop was told to compile a model)."""
    kinds = ("module", "conv", "ddp", "fsdp", "compiled", "hf_generator")
    return {
        "with_parameters": any(getattr(m, "_parameters", None) for k in kinds for m in instances.get(k, []))
    }


def _grad_scalers(scalers: list) -> dict:
    enabled = [s for s in scalers if getattr(s, "_enabled", False)]
    return {"instances": len(scalers), "enabled": bool(enabled)}


def _compile(compiled: list) -> dict:
    dynamo_utils = sys.modules.get("torch._dynamo.utils")
    graphs = lowered = skips = 0
    if dynamo_utils is not None:
        graphs = int(dynamo_utils.counters.get("stats", {}).get("unique_graphs", 0))
        inductor = dynamo_utils.counters.get("inductor", {})
        skips = int(inductor.get("cudagraph_skips", 0))
        lowered = sum(int(inductor.get(k, 0)) for k in FX_GRAPH_CACHE_COUNTERS)
    modes = sorted({str(call["mode"] or "default") for call in _compile_calls})
    return {
        "used": bool(compiled or _compile_calls or graphs),
        "compiled_modules": len(compiled),
        "calls": _compile_calls[:MAX_LISTED],
        "modes": modes,
        "graphs_compiled": graphs,
        "inductor_graphs": lowered,
        # Graphs run without CUDA graphs under reduce-overhead, and inductor's reasons (first few).
        "cudagraph_skips": skips,
        "cudagraph_skip_reasons": list(_cudagraph_skip_reasons),
        "observed": _installed,
    }


def _optimizers(optimizers: list) -> list[dict]:
    import torch

    # Wrappers that hold the real optimizer (accelerate's AcceleratedOptimizer) are described by it.
    inner = [getattr(o, "optimizer", None) for o in optimizers]
    wrapped_ids = {id(o) for o in inner if isinstance(o, torch.optim.Optimizer)}
    out = []
    for optimizer in optimizers:
        if isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
            continue
        cls = type(optimizer)
        group = optimizer.param_groups[0] if optimizer.param_groups else {}
        try:
            supports_fused = "fused" in inspect.signature(cls.__init__).parameters
        except (TypeError, ValueError):
            supports_fused = False
        entry = {
            "class": cls.__name__,
            "module": cls.__module__,
            "foreach": group.get("foreach"),
            "fused": group.get("fused"),
            "supports_fused": supports_fused,
            "params": sum(len(g.get("params", [])) for g in optimizer.param_groups),
            "wrapped": id(optimizer) in wrapped_ids,
        }
        entry["foreach_effective"] = _effective_foreach(optimizer, entry)
        out.append(entry)
    return out


def _effective_foreach(optimizer: Any, entry: dict) -> bool | None:
    """foreach=None lets torch choose: the multi-tensor path when every parameter is a CUDA tensor."""
    if entry["fused"]:
        return False
    if entry["foreach"] is not None:
        return bool(entry["foreach"])
    from torch.optim.optimizer import _default_to_fused_or_foreach

    params = [p for g in optimizer.param_groups for p in g.get("params", [])]
    _, foreach = _default_to_fused_or_foreach(params, differentiable=False, use_fused=False)
    return bool(foreach)


def _data_loaders(loaders: list) -> list[dict]:
    return [
        {
            "num_workers": int(getattr(dl, "num_workers", 0)),
            "pin_memory": bool(getattr(dl, "pin_memory", False)),
            "persistent_workers": bool(getattr(dl, "persistent_workers", False)),
            "prefetch_factor": getattr(dl, "prefetch_factor", None),
            "batch_size": getattr(dl, "batch_size", None),
            "dataset": type(getattr(dl, "dataset", None)).__name__,
        }
        for dl in loaders
    ]


def _distributed(instances: dict[str, list]) -> dict:
    import torch

    out: dict[str, Any] = {"initialized": False}
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        out.update(
            initialized=True,
            backend=str(dist.get_backend()),
            world_size=dist.get_world_size(),
            rank=dist.get_rank(),
        )
    out["ddp"] = [
        {
            "bucket_cap_mb": round(getattr(m, "bucket_bytes_cap", 0) / 2**20, 3),
            "param_mb": round(_param_bytes(m) / 2**20, 3),
            "gradient_as_bucket_view": bool(getattr(m, "gradient_as_bucket_view", False)),
            "static_graph": bool(getattr(m, "static_graph", False)),
            "find_unused_parameters": bool(getattr(m, "find_unused_parameters", False)),
            "module": type(getattr(m, "module", None)).__name__,
        }
        for m in instances.get("ddp", [])
    ]
    out["fsdp"] = [
        {
            "class": type(m).__name__,
            "sharding_strategy": _plain(getattr(m, "sharding_strategy", None)),
            "mixed_precision": _plain(getattr(m, "mixed_precision", None)),
        }
        for m in instances.get("fsdp", [])[:MAX_LISTED]
    ]
    fsdp2 = [m for m in instances.get("fsdp", []) if hasattr(m, "_get_fsdp_state")]
    if fsdp2:
        out["fsdp2"] = _fsdp2(fsdp2)
    return out


def _param_bytes(module: Any) -> int:
    # A sharded parameter (DTensor) reports the full tensor's numel: the bytes each collective moves in all.
    return sum(p.numel() * p.element_size() for p in module.parameters())


def _prefetch_depth(states: list[tuple[Any, Any]], attribute: str) -> int:
    return max((len(getattr(state, attribute, None) or ()) for _, state in states), default=0)


def _fsdp2(units: list) -> dict:
    """fully_shard's settings over the model's FSDP units: how many, how many reshard after forward, how far
    explicit prefetch reaches, and the root's parameter bytes and parameter-holding leaf modules (the blocks a
    single unit could be split into)."""
    states = [(m, m._get_fsdp_state()) for m in units]
    groups = [(m, getattr(state, "_fsdp_param_group", None)) for m, state in states]
    with_params = [(m, g) for m, g in groups if g is not None]
    roots = [m for m in units if not any(m is not o and m in set(o.modules()) for o in units)]
    root = roots[0] if roots else units[0]
    nested = {id(m) for m in units if m is not root}
    leaves = [
        sub
        for sub in root.modules()
        if id(sub) not in nested
        and not list(sub.children())
        and any(True for _ in sub.parameters(recurse=False))
    ]
    return {
        "units": len(units),
        "units_with_params": len(with_params),
        "reshard_after_forward_units": sum(1 for _, g in with_params if g.post_forward_mesh_info is not None),
        # How many blocks ahead the explicit prefetch lists reach (0: FSDP2's implicit prefetch only).
        "forward_prefetch_depth": _prefetch_depth(states, "_states_to_forward_prefetch"),
        "backward_prefetch_depth": _prefetch_depth(states, "_states_to_backward_prefetch"),
        "param_mb": round(_param_bytes(root) / 2**20, 3),
        "root_leaf_modules": len(leaves) if not nested else None,
    }


def _channels_last(convs: list) -> dict:
    import torch

    four_d = [c for c in convs if getattr(c, "weight", None) is not None and c.weight.dim() == 4]
    # A 1x1 kernel's weight is contiguous in both formats: only the others tell which one was chosen.
    telling = [c for c in four_d if c.weight.shape[-1] * c.weight.shape[-2] > 1 or c.weight.shape[1] > 1]
    channels_last = [
        c
        for c in telling
        if c.weight.is_contiguous(memory_format=torch.channels_last) and not c.weight.is_contiguous()
    ]
    return {
        "conv2d_modules": len(four_d),
        "channels_last_modules": len(channels_last),
        "used": bool(telling) and len(channels_last) == len(telling),
    }


def _generation(models: list) -> dict:
    """Hugging Face models that can generate(): the KV cache a generate() call builds
    (generation_config.cache_implementation; None is the dynamic default, which grows every token) and
    whether the model's forward was replaced by a compiled one."""
    return {
        "models": [
            {
                "class": type(model).__name__,
                "cache_implementation": _plain(
                    getattr(getattr(model, "generation_config", None), "cache_implementation", None)
                ),
                "forward_compiled": hasattr(getattr(model, "forward", None), "_torchdynamo_orig_callable"),
                "compiles_static_forward": _compiles_static_forward(
                    getattr(model, "generation_config", None)
                ),
            }
            for model in models
        ]
    }


def _compiles_static_forward(generation_config: object) -> bool | None:
    """Whether this transformers' generate() compiles the decoding forward itself once the cache is static
    (a generation config with `compile_config`, automatic compilation not disabled); None without a
    generation config."""
    if generation_config is None:
        return None
    return hasattr(generation_config, "compile_config") and not getattr(
        generation_config, "disable_compile", False
    )


def _framework(instances: dict[str, list]) -> dict:
    trainers, arguments = instances.get("hf_trainer", []), instances.get("hf_arguments", [])
    if trainers or arguments:
        args = getattr(trainers[0], "args", None) if trainers else arguments[0]
        return {
            "name": "transformers",
            "trainer": type(trainers[0]).__name__ if trainers else None,
            "version": getattr(sys.modules.get("transformers"), "__version__", None),
            "training_arguments": {key: _plain(getattr(args, key, None)) for key in HF_ARGUMENTS},
        }
    lightning = instances.get("lightning_trainer", [])
    if lightning:
        trainer = lightning[0]
        module = type(trainer).__module__.split(".")[0]
        return {
            "name": "lightning",
            "trainer": type(trainer).__name__,
            "version": getattr(sys.modules.get(module), "__version__", None),
            "precision": _plain(getattr(trainer, "precision", None)),
            "strategy": type(getattr(trainer, "strategy", None)).__name__,
            "accumulate_grad_batches": _plain(getattr(trainer, "accumulate_grad_batches", None)),
        }
    return {"name": None}
