"""Suggestions conditioned on the run: what it had switched on (the injector's `config`,
hybrid.inject.run_config)
and which framework drove it. A setting that is already on is never suggested; a framework's own switch
is given when the framework is detected (Hugging Face `TrainingArguments`, Lightning `Trainer`); every
suggestion carries the condition that made it apply, and the ops, kernels or layers it is about.

`RunConfig` reads the recorded configuration; each accessor returns None when the run did not record it
(captures made before the injector recorded `config`, exports made elsewhere), and advice then falls back to
what the timeline shows, saying so in its condition.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from hybrid.analysis.host_dispatch import AUTOGRAD_NODE_PREFIX
from hybrid.analysis.step_shapes import padding_buckets, shapes_change_per_step
from hybrid.numbers import significant

APPLIES_TO_SHOWN = 3


@dataclass(frozen=True)
class Suggestion:
    text: str
    condition: str  # why it applies to this run: the evidence or configuration that triggered it
    applies_to: tuple[str, ...] = ()  # ops, kernels or layers it is about
    # A way to find the code responsible, not a change: moot once the finding's callsites name it.
    locates_code: bool = False
    # The call in the user's code the change moves ("gc.collect()"): the finding is placed at the lines
    # the run recorded for it (hybrid.analysis.callsites).
    moves_call: str = ""
    # The texts of other changes this one makes too (a compile in reduce-overhead mode fuses as the default
    # compile does): the report's list of changes names it once for the findings asking for either.
    includes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {**asdict(self), "applies_to": list(self.applies_to), "includes": list(self.includes)}

    def render(self) -> str:
        """One line for the `suggestions` list: the change, then why, then what it is about (the first
        APPLIES_TO_SHOWN names, an autograd node by its own name; all of them, as recorded, are in
        `advice`)."""
        names = [name.removeprefix(AUTOGRAD_NODE_PREFIX) for name in self.applies_to[:APPLIES_TO_SHOWN]]
        if len(self.applies_to) > APPLIES_TO_SHOWN:
            names.append(f"{len(self.applies_to) - APPLIES_TO_SHOWN} more")
        about = f"; applies to {', '.join(names)}" if names else ""
        return f"{self.text} (why: {self.condition}{about})"


@dataclass(frozen=True)
class RunConfig:
    """The `config` block of inject.json, read defensively; every getter is None when not recorded. `observed`
    holds what the timeline proves where nothing was recorded: a TF32 kernel ran only with TF32 allowed, bf16
    GEMMs only under autocast or bf16 tensors, a compiled region only with torch.compile; the absence of
    DataLoader fetches in a torch trace proves no DataLoader fed the measured steps."""

    raw: dict = field(default_factory=dict)
    observed: dict = field(default_factory=dict)

    @property
    def recorded(self) -> bool:
        return bool(self.raw)

    def _get(self, *path: str):
        node = self.raw
        for key in path:
            if not isinstance(node, dict) or key not in node:
                return None
            node = node[key]
        return node

    # -- numeric precision
    def _or_observed(self, value, key: str):
        return self.observed.get(key) if value is None else value

    @property
    def tf32_matmul(self) -> bool | None:
        return self._or_observed(self._get("precision", "tf32_matmul"), "tf32_matmul")

    @property
    def tf32_conv(self) -> bool | None:
        return self._or_observed(self._get("precision", "tf32_conv"), "tf32_conv")

    @property
    def cudnn_benchmark(self) -> bool | None:
        return self._get("precision", "cudnn_benchmark")

    @property
    def autocast_dtypes(self) -> list[str] | None:
        """Dtypes of the autocast regions that ran ([] for none); with nothing recorded, the 16-bit types the
        GEMM kernels ran in (mixed precision by autocast or by 16-bit tensors)."""
        if self._get("autocast", "observed") is not True:
            return self.observed.get("half_gemm_dtypes") or None
        return list(self._get("autocast", "dtypes") or [])

    @property
    def grad_scaler(self) -> bool | None:
        return self._get("grad_scaler", "enabled")

    # -- compiler, graphs, layout
    @property
    def compiled(self) -> bool | None:
        return self._or_observed(self._get("compile", "used"), "compiled")

    @property
    def builds_modules(self) -> bool | None:
        """Whether the process held an nn.Module with parameters (None: not recorded)."""
        return self._get("modules", "with_parameters")

    @property
    def graphs_compiled(self) -> int | None:
        """The graphs dynamo compiled in the process (0: torch.compile was called and compiled nothing)."""
        return self._get("compile", "graphs_compiled")

    @property
    def inductor_graphs(self) -> int | None:
        """The graphs inductor compiled (a training graph's forward and backward count apart)."""
        return self._get("compile", "inductor_graphs")

    @property
    def cudagraph_skips(self) -> int | None:
        """Compiled graphs inductor ran without CUDA graphs under reduce-overhead."""
        return self._get("compile", "cudagraph_skips")

    @property
    def cudagraph_skip_reasons(self) -> list[str]:
        """Inductor's reasons for running compiled graphs without CUDA graphs under reduce-overhead."""
        return list(self._get("compile", "cudagraph_skip_reasons") or [])

    @property
    def compile_modes(self) -> list[str]:
        return list(self._get("compile", "modes") or [])

    @property
    def cuda_graphs(self) -> bool | None:
        graphs = self._get("cuda_graphs", "graphs")
        if graphs is None:
            return None
        return graphs > 0 or "reduce-overhead" in self.compile_modes or "max-autotune" in self.compile_modes

    @property
    def channels_last(self) -> bool | None:
        return self._get("channels_last", "used")

    @property
    def stepped_call(self) -> str | None:
        """The library function the step's model forwards run inside (`generate` where each step is one
        decode forward of Hugging Face's generate()), from the injector's step detection."""
        return self.observed.get("stepped_call")

    @property
    def generation_caches(self) -> list[str | None] | None:
        """The KV-cache implementation of each live Hugging Face model that can generate (None: the dynamic
        default); None where the run recorded none."""
        models = self._get("generation", "models")
        if not isinstance(models, list) or not models:
            return None
        return [m.get("cache_implementation") for m in models if isinstance(m, dict)]

    @property
    def decodes_with_dynamic_cache(self) -> bool:
        """Each step is a forward of generate() and no generating model was recorded with a static cache:
        transformers' dynamic cache grows by torch.cat every token, so the forward's shapes change each step
        and CUDA graphs of the model overwrite the cache between replays (on the H200, GPT-2's
        reduce-overhead run stopped there: benchmarks/results/s9_h200/verify.md)."""
        if self.stepped_call != "generate":
            return False
        return not any(cache == "static" for cache in self.generation_caches or [])

    @property
    def generate_compiles_static_forward(self) -> bool | None:
        """Whether generate() compiles the decoding forward itself once the KV cache is static (every
        generating model recorded says so); None where the run recorded no such flag."""
        models = self._get("generation", "models")
        flags = [m.get("compiles_static_forward") for m in models or [] if isinstance(m, dict)]
        if not flags or any(flag is None for flag in flags):
            return None
        return all(flags)

    # -- optimizer and input pipeline
    @property
    def row_loop_rows(self) -> int | None:
        """Rows of the tensor a Python loop in the step walks one by one (hybrid.analysis.row_loop)."""
        return self.observed.get("row_loop_rows")

    @property
    def data_dependent_syncs(self) -> tuple[str, ...]:
        """Ops of data-dependent shape in a step that synchronizes: no CUDA graph is captured across them."""
        return tuple(self.observed.get("data_dependent_syncs") or ())

    @property
    def shapes_change(self) -> str | None:
        """How the step's input shapes change, where it runs new ones every few steps
        (hybrid.analysis.step_shapes: a batch padded to its own longest sequence); else None."""
        shapes = self.observed.get("step_shape_sets")
        if not shapes:
            return None
        return f"the step ran {int(shapes[0])} different sets of input shapes in {int(shapes[1])} steps"

    @property
    def varying_sizes(self) -> tuple[str, list[int]] | None:
        """Where the step's input shapes change every few steps and one input's dimension carries the change
        (hybrid.analysis.step_shapes.varying_input): that input ("aten::to [32, L]") and the sizes L took;
        else None."""
        name, sizes = self.observed.get("step_varying_input"), self.observed.get("step_varying_sizes")
        if not (self.shapes_change and name and sizes):
            return None
        return str(name), [int(size) for size in sizes]

    @property
    def graphs_stop_at_syncs(self) -> str | None:
        """Why no CUDA graph holds the step, where data-dependent syncs stop it; else None."""
        syncs = self.data_dependent_syncs
        if not syncs:
            return None
        return (
            f"the step syncs on data-dependent shapes ({', '.join(syncs)}), across which no CUDA graph is "
            "captured"
        )

    @property
    def gradients_clipped_one_by_one(self) -> int | None:
        """The most gradients one clip_grad_norm_(..., foreach=False) call clipped (0 where every recorded
        call left foreach on); None where no call was recorded."""
        calls = [c for c in self._get("grad_clipping") or [] if isinstance(c, dict)]
        if not calls:
            return None
        return max((int(c.get("tensors") or 0) for c in calls if c.get("foreach") is False), default=0)

    @property
    def optimizers(self) -> list[dict] | None:
        optimizers = self._get("optimizers")
        return None if optimizers is None else [o for o in optimizers if isinstance(o, dict)]

    @property
    def data_loaders(self) -> list[dict] | None:
        """The DataLoaders alive at the window's end; [] also when the torch trace shows no batch
        fetched from one."""
        loaders = self._get("data_loaders")
        if loaders is None:
            return [] if self.observed.get("data_loader_iterated") is False else None
        return [d for d in loaders if isinstance(d, dict)]

    @property
    def pins_without_workers(self) -> bool:
        """Every DataLoader without pin_memory also has num_workers=0, so pinning it would run on the main
        thread inside the step (Lightning CNN on the H200: pin_memory=True alone took the plain step from
        8.86 to 12.7 ms); workers pin off it."""
        unpinned = [d for d in self.data_loaders or [] if not d.get("pin_memory")]
        return bool(unpinned) and not any(d.get("num_workers") for d in unpinned)

    # -- distribution and framework
    @property
    def ddp(self) -> bool | None:
        ddp = self._get("distributed", "ddp")
        return self.observed.get("ddp") if ddp is None else bool(ddp)

    @property
    def fsdp(self) -> bool | None:
        fsdp = self._get("distributed", "fsdp")
        return None if fsdp is None else bool(fsdp)

    @property
    def ddp_bucket_cap_mb(self) -> float | None:
        ddp = self._get("distributed", "ddp") or []
        return ddp[0].get("bucket_cap_mb") if ddp else None

    @property
    def ddp_param_mb(self) -> float | None:
        ddp = self._get("distributed", "ddp") or []
        return ddp[0].get("param_mb") if ddp else None

    @property
    def fsdp2(self) -> dict | None:
        """fully_shard's settings (hybrid.inject.run_config._fsdp2), None where FSDP2 was not recorded."""
        fsdp2 = self._get("distributed", "fsdp2")
        return fsdp2 if isinstance(fsdp2, dict) else None

    @property
    def framework(self) -> str | None:
        return self._get("framework", "name")

    def hf(self, argument: str):
        return self._get("framework", "training_arguments", argument)

    @property
    def lightning_precision(self) -> str | None:
        return self._get("framework", "precision")


def config_of(inject: dict, observed: dict | None = None) -> RunConfig:
    """The RunConfig of a pass's inject.json (or a profile's extras, which carry it): its `config`, and what
    the timeline (`observed`) and the step detection show."""
    config = inject.get("config")
    shown = dict(observed or {})
    detection = inject.get("step_detection")
    per_call = detection.get("per_call") if isinstance(detection, dict) else None
    if isinstance(per_call, dict) and isinstance(per_call.get("function"), str):
        shown["stepped_call"] = per_call["function"]
    return RunConfig(config if isinstance(config, dict) else {}, shown)


def observed_config(metrics: dict) -> dict:
    """What the measured timeline proves about the configuration (RunConfig.observed), from metric values."""

    def raw(name: str) -> object:
        metric = metrics.get(name)
        return metric.get("value") if isinstance(metric, dict) else getattr(metric, "value", None)

    def value(name: str) -> float:
        number = raw(name)
        return float(number) if isinstance(number, (int, float)) else 0.0

    out: dict = {}
    if value("gemm_tf32_matmul_ms") > 0:
        out["tf32_matmul"] = True
    if value("gemm_tf32_conv_ms") > 0:
        out["tf32_conv"] = True
    half = [
        dtype
        for dtype, name in (("bfloat16", "gemm_bf16_ms"), ("float16", "gemm_fp16_ms"))
        if value(name) > 0
    ]
    if half:
        out["half_gemm_dtypes"] = half
    if value("compiled_region_ms") > 0 or value("graph_breaks") > 0 or value("uses_compile") > 0:
        out["compiled"] = True
    if "cpu_only_ops_ms" in metrics:
        out["data_loader_iterated"] = "data_loader_ms" in metrics
    if "ddp_ops_per_step" in metrics:
        # DistributedDataParallel records its reducer's work in every step it wraps.
        out["ddp"] = value("ddp_ops_per_step") > 0
    if value("row_loop_rows") > 0:
        out["row_loop_rows"] = int(value("row_loop_rows"))
    signatures, shaped_steps = value("step_shape_signatures"), value("step_shape_steps")
    if shapes_change_per_step(signatures, shaped_steps):
        out["step_shape_sets"] = [int(signatures), int(shaped_steps)]
        varying, sizes = raw("step_varying_input"), raw("step_varying_sizes")
        if isinstance(varying, str) and isinstance(sizes, str) and sizes:
            out["step_varying_input"] = varying
            out["step_varying_sizes"] = [int(size) for size in sizes.split(", ")]
    shaped = raw("data_dependent_sync_ops")
    if isinstance(shaped, str) and shaped:
        out["data_dependent_syncs"] = shaped.split(", ")
    return out


# ----------------------------------------------------------------------------- shared switches
def enable_tf32(
    config: RunConfig, *, matmul: bool, conv: bool, condition: str, applies_to: tuple[str, ...] = ()
) -> list[Suggestion]:
    """Turning TF32 on for the families (matmul, conv) whose FP32 kernels took the time, unless it is on."""
    need_matmul = matmul and config.tf32_matmul is not True
    need_conv = conv and config.tf32_conv is not True
    if not need_matmul and not need_conv:
        return []
    state = (
        "TF32 is off in this run"
        if config.recorded
        else "the run's TF32 flags were not recorded and no TF32 kernel of that family ran"
    )
    if config.framework == "transformers":
        return [
            Suggestion(
                "TrainingArguments(tf32=True)",
                f"{condition}; {state} (Hugging Face Trainer: tf32={config.hf('tf32')})",
                applies_to,
            )
        ]
    parts = []
    if need_matmul:
        parts.append(
            "torch.backends.cuda.matmul.allow_tf32 = True (or torch.set_float32_matmul_precision('high'))"
        )
    if need_conv:
        parts.append("torch.backends.cudnn.allow_tf32 = True")
    where = (
        " before Trainer.fit (Lightning's precision='32-true' leaves TF32 to torch)"
        if config.framework == "lightning"
        else ""
    )
    return [Suggestion("; ".join(parts) + where, f"{condition}; {state}", applies_to)]


def use_autocast(config: RunConfig, *, condition: str, applies_to: tuple[str, ...] = ()) -> list[Suggestion]:
    """Mixed precision in the framework's words, unless an autocast region already ran."""
    dtypes = config.autocast_dtypes
    if dtypes:
        return []
    state = (
        "no autocast region ran"
        if dtypes is not None
        else "autocast use was not recorded and no 16-bit GEMM kernel ran"
    )
    if config.framework == "transformers":
        return [
            Suggestion(
                "TrainingArguments(bf16=True)",
                f"{condition}; {state} (Hugging Face Trainer: "
                f"bf16={config.hf('bf16')}, fp16={config.hf('fp16')})",
                applies_to,
            )
        ]
    if config.framework == "lightning":
        return [
            Suggestion(
                "Trainer(precision='bf16-mixed')",
                f"{condition}; {state} (Lightning precision={config.lightning_precision!r})",
                applies_to,
            )
        ]
    return [
        Suggestion(
            "Train with mixed precision: with torch.autocast('cuda', dtype=torch.bfloat16): ...",
            f"{condition}; {state}",
            applies_to,
        )
    ]


def remove_graph_breaks(reasons: str | None, hints: str | None, condition: str) -> Suggestion:
    """The breaks' own reasons and dynamo's hints where the run recorded them (hybrid.analysis.graph_breaks);
    how to list them where it recorded only a count. One text for every finding a graph break causes, so
    What to change first says it once."""
    if not reasons:
        return Suggestion(
            "List the graph breaks with TORCH_LOGS=graph_breaks or torch._dynamo.explain(model)(inputs); "
            "remove data-dependent Python control flow, .item() and print() from compiled code",
            condition,
        )
    # A value read to the host inside compiled code breaks it wherever it is; kept on the device, it does not
    # (the planted graph_breaks' twin keeps its logged maximum as a tensor).
    scalar = "Tensor.item()" in reasons
    return Suggestion(
        f"Remove what breaks the graph: {reasons}"
        + (" (or keep the value as a device tensor and read it outside the compiled code)" if scalar else "")
        + (f"; dynamo's own hint: {hints}" if hints else ""),
        condition,
        tuple(reasons.split("; ")),
    )


def use_compile(
    config: RunConfig, *, why: str, condition: str, mode: str | None = None, applies_to: tuple[str, ...] = ()
) -> list[Suggestion]:
    """torch.compile (in a mode) unless the model already runs compiled (in that mode); `why` completes
    "compiling would ..."."""
    if config.compiled and (mode is None or mode in config.compile_modes):
        return []
    call, default_call = _compile_call(config, mode), _compile_call(config, None)
    if config.compiled:
        state = f"the model is compiled with mode {', '.join(config.compile_modes) or 'default'}"
    else:
        state = (
            ("the step runs eager" if config.builds_modules is False else "the model runs eager")
            if config.compiled is False
            else "torch.compile use was not recorded and no compiled region ran"
        )
    # The change alone as its text, what it would do in its condition: two findings that both ask for
    # the compile (fusion, launch overhead) then list it once (pyg's GCN: #1 and #3).
    return [
        Suggestion(
            call,
            f"{condition}; {state}; compiling would {why}",
            applies_to,
            includes=(default_call,) if mode else (),
        )
    ]


def _compile_call(config: RunConfig, mode: str | None) -> str:
    if config.builds_modules is False:
        # No model to compile: the step's tensor code is the script's own (a raw tensor loop).
        how = f"@torch.compile(mode='{mode}')" if mode else "@torch.compile"
        return (
            f"Move the step's tensor code into a function decorated with {how} (the script builds no model)"
        )
    if config.framework == "transformers":
        return (
            f"TrainingArguments(torch_compile=True, torch_compile_mode='{mode}')"
            if mode
            else "TrainingArguments(torch_compile=True)"
        )
    return f"torch.compile(model, mode='{mode}')" if mode else "torch.compile(model)"


def use_cuda_graphs(
    config: RunConfig, *, condition: str, applies_to: tuple[str, ...] = ()
) -> list[Suggestion]:
    """CUDA graphs of the model (a static KV cache for generate()), unless the run has them or the step
    syncs on data-dependent shapes, across which no graph is captured."""
    if config.cuda_graphs or config.data_dependent_syncs:
        return []
    if config.decodes_with_dynamic_cache:
        dynamic = (
            f"{condition}; each step is one forward of generate() with the dynamic KV cache, which grows "
            "every token: its shapes change each step and CUDA graphs of the model cannot hold it"
        )
        if config.generate_compiles_static_forward is False:
            # A transformers whose generate() does not compile: the forward is compiled by hand.
            text = (
                "Decode with a static KV cache and graph the forward: "
                "model.generation_config.cache_implementation = 'static' and "
                "model.forward = torch.compile(model.forward, mode='reduce-overhead', fullgraph=True)"
            )
        else:
            # generate() compiles the forward itself once the cache is static (generation_config.
            # compile_config); wrapping model.forward in a reduce-overhead torch.compile as well stopped
            # GPT-2's generate() on the H100 ("accessing tensor output of CUDAGraphs that has been
            # overwritten", benchmarks/results/s12/hf_generate_static.md).
            text = (
                "Decode with a static KV cache: model.generation_config.cache_implementation = 'static' "
                "(generate() then compiles the decoding forward itself, generation_config.compile_config; "
                "leave model.forward uncompiled)"
            )
        return [Suggestion(text, dynamic, applies_to)]
    if config.shapes_change:
        target = pad_target(config)
        pad = (
            f"a multiple of {target.multiple} so the step repeats its shapes ({target.sizes})"
            if target
            else "a few fixed sizes (the longest length, or buckets such as multiples of 64) so the step "
            "repeats its shapes"
        )
        return [
            Suggestion(
                f"Pad the step's inputs to {pad}, then " + _compile_call(config, "reduce-overhead"),
                f"{condition}; {config.shapes_change}"
                + (f" ({target.evidence})" if target else "")
                + ", and CUDA graphs record one graph per set (each new one compiles and records again)",
                applies_to,
            )
        ]
    return use_compile(
        config,
        why="capture the step as CUDA graphs (no host dispatch per kernel)",
        condition=condition,
        mode="reduce-overhead",
        applies_to=applies_to,
    )


def capture_whole_step(
    config: RunConfig, *, condition: str, applies_to: tuple[str, ...] = ()
) -> list[Suggestion]:
    """One CUDA graph of the whole training step, unless the run already captures graphs: what removes the
    framework's host work that compiling the model leaves eager (autograd's gradient accumulation, one node
    per parameter, and the optimizer step). Not under a Trainer (Hugging Face, Lightning), which runs the
    step itself, nor across data-dependent syncs."""
    if config.cuda_graphs or config.data_dependent_syncs or config.framework in ("transformers", "lightning"):
        return []
    return [
        Suggestion(
            "Capture the whole training step as one CUDA graph: torch.cuda.graph around forward, backward "
            "and optimizer.step, with static input tensors and the optimizer built with capturable=True; "
            "replayed, autograd's nodes and the optimizer's bookkeeping cost no host time",
            condition,
            applies_to,
        )
    ]


def fused_optimizer(config: RunConfig, *, condition: str) -> list[Suggestion]:
    """The run's own optimizer class with fused=True, when it supports it and does not use it."""
    optimizers = config.optimizers
    if optimizers is None:
        return [
            Suggestion(
                "Use your optimizer's fused implementation where it has one (torch.optim.AdamW/Adam/SGD("
                "..., fused=True))",
                f"{condition}; the optimizer class was not recorded",
            )
        ]
    out = []
    for optimizer in optimizers:
        if optimizer.get("supports_fused") and not optimizer.get("fused"):
            out.append(
                Suggestion(
                    f"torch.optim.{optimizer['class']}(..., fused=True)",
                    f"{condition}; {optimizer['class']} runs with fused="
                    f"{optimizer.get('fused')}, foreach={optimizer.get('foreach_effective')}",
                    (optimizer["class"],),
                )
            )
        elif not optimizer.get("supports_fused") and optimizer.get("foreach_effective") is False:
            # Without a fused implementation, the multi-tensor path still runs one op per parameter group.
            out.append(
                Suggestion(
                    f"{optimizer['class']}(..., foreach=True)",
                    f"{condition}; {optimizer['class']} has no fused implementation and runs with "
                    f"foreach={optimizer.get('foreach')} (one op per parameter)",
                    (optimizer["class"],),
                )
            )
    return out


# clip_grad_norm_(..., foreach=False) runs a norm and a multiply kernel for each gradient.
LAUNCHES_PER_CLIPPED_GRADIENT = 2


def foreach_clipping(config: RunConfig, *, condition: str) -> list[Suggestion]:
    """clip_grad_norm_ without foreach=False, where the run clipped gradients one by one."""
    gradients = config.gradients_clipped_one_by_one
    if not gradients:
        return []
    return [
        Suggestion(
            "torch.nn.utils.clip_grad_norm_(..., foreach=True) (or leave foreach unset: on CUDA it is the "
            "default), so the norms and the scaling run as a few multi-tensor kernels",
            f"{condition}; clip_grad_norm_ ran with foreach=False over {gradients} gradients: a norm and a "
            f"multiply kernel for each, {LAUNCHES_PER_CLIPPED_GRADIENT * gradients} launches a call",
            ("clip_grad_norm_",),
        )
    ]


def loader_workers(
    config: RunConfig, *, condition: str, pin: bool = True, workers: int | None = None
) -> list[Suggestion]:
    """More DataLoader workers (persistent, prefetching, and pinned unless `pin` is False: a CPU-only run
    copies nothing to a device), in the framework's words, for what is off; `workers` of them where the
    finding chose the count from the run's cores and fetch (hybrid.rules.data_pipeline.Workers)."""
    loaders = config.data_loaders
    count = str(workers) if workers else None
    if config.framework == "transformers":
        wanted = {
            "dataloader_num_workers": count or "4",
            "dataloader_persistent_workers": "True",
            "dataloader_pin_memory": "True",
        }
        current = {
            "dataloader_num_workers": config.hf("dataloader_num_workers"),
            "dataloader_persistent_workers": config.hf("dataloader_persistent_workers"),
            "dataloader_pin_memory": config.hf("dataloader_pin_memory"),
        }
        missing = [k for k, v in current.items() if not v and (pin or k != "dataloader_pin_memory")]
        if not missing:
            return []
        args = ", ".join(f"{k}={wanted[k]}" for k in missing)
        return [
            Suggestion(
                f"TrainingArguments({args})",
                f"{condition}; the Trainer runs with " + ", ".join(f"{k}={current[k]}" for k in missing),
            )
        ]
    if loaders is not None and not loaders:
        how = (
            "the script uses no DataLoader"
            if config.recorded
            else "no batch was fetched from a DataLoader in the measured steps (torch trace)"
        )
        pinned = ", pin_memory=True" if pin else ""
        return [
            Suggestion(
                f"Build the batches in a torch.utils.data.DataLoader(dataset, num_workers={count or 'N'}, "
                f"persistent_workers=True{pinned}), so worker processes prepare them ahead",
                f"{condition}; {how}",
            )
        ]
    loader = (loaders or [{}])[0]
    missing = []
    if not loader.get("num_workers"):
        missing.append(f"num_workers={count}" if count else "num_workers=N>0")
    if loader.get("num_workers") and not loader.get("persistent_workers"):
        missing.append("persistent_workers=True")
    if pin and not loader.get("pin_memory"):
        missing.append("pin_memory=True")
    if not missing:
        return []
    state = (
        f"its DataLoader has num_workers={loader.get('num_workers')}, persistent_workers="
        f"{loader.get('persistent_workers')}, pin_memory={loader.get('pin_memory')}"
        if loaders
        else "the DataLoader's settings were not recorded"
    )
    return [Suggestion(f"DataLoader({', '.join(missing)})", f"{condition}; {state}")]


@dataclass(frozen=True)
class PadTarget:
    """What to pad the step's inputs to, from the sizes its varying input took (RunConfig.varying_sizes)."""

    multiple: int
    padded: list[int]
    evidence: str  # "aten::to [32, L] took 11 sizes of L, 182 to 201"

    @property
    def sizes(self) -> str:
        return f"{len(self.padded)} sizes: {', '.join(map(str, self.padded))}"


def pad_target(config: RunConfig) -> PadTarget | None:
    """The padding that leaves the step's varying input a few sizes; None where no one input carries the
    change."""
    varying = config.varying_sizes
    if varying is None:
        return None
    name, sizes = varying
    multiple, padded = padding_buckets(sizes)
    return PadTarget(multiple, padded, f"{name} took {len(sizes)} sizes of L, {sizes[0]} to {sizes[-1]}")


def same_inputs_every_step(
    ops: str, shapes: str | None, config: RunConfig, op_names: frozenset[str], *, condition: str
) -> Suggestion:
    """Padding the inputs whose size varies, where the host time of `ops` grows on the steps that ran input
    shapes no typical or earlier step ran (`shapes`, hybrid.analysis.jitter): one text for the findings
    that claim that time (the step-time variation and the host work it lies in), so the report lists the
    change once and the variation is shown as the host finding's alternative. Where one input's dimension
    carries the change, the text gives its sizes and the multiple to pad to, and the tokenizer's argument
    where the model reads token ids (batch_inputs of the run's `op_names`)."""
    evidence = f"{condition}; the slow steps spend more host time in {ops}" + (
        f", with input shapes no typical or earlier step ran: {shapes}" if shapes else ""
    )
    target = pad_target(config)
    if target is None:
        return Suggestion(
            "Give the ops that grew on the slow steps the same inputs every step: pad or bucket the inputs "
            "whose size varies, and move what they do per sample into DataLoader workers",
            evidence,
        )
    tokenizer = (
        f"; tokenizer(..., pad_to_multiple_of={target.multiple})"
        if "token ids" in batch_inputs(op_names)
        else ""
    )
    return Suggestion(
        f"Pad the step's inputs to a multiple of {target.multiple} so the work each new size costs runs once "
        f"per size ({target.sizes}){tokenizer}",
        f"{evidence}; {config.shapes_change}: {target.evidence}",
    )


# What the model reads a batch made on the host with tells what the host made: ids looked up in an embedding
# table (token ids: text tokenized in the step), or images through convolutions. torch.profiler names the ops.
TOKEN_INPUT_OPS = frozenset({"aten::embedding", "aten::embedding_bag", "aten::_embedding_bag"})
IMAGE_INPUT_OPS = frozenset({"aten::convolution", "aten::_convolution", "aten::cudnn_convolution"})


def batch_inputs(op_names: frozenset[str]) -> dict[str, tuple[str, ...]]:
    """The kinds of input the run's operators show ('token ids', 'images') with the operators that show
    each; empty when neither shows (no torch pass, or a model that reads neither)."""
    kinds = {"token ids": sorted(TOKEN_INPUT_OPS & op_names), "images": sorted(IMAGE_INPUT_OPS & op_names)}
    return {kind: tuple(ops) for kind, ops in kinds.items() if ops}


def host_batch_work(op_names: frozenset[str], *, condition: str) -> list[Suggestion]:
    """What takes the per-batch work the host does in the step off the GPU's path, for the input the model
    reads: tokenize ahead or in batches for token ids, transforms on the GPU for images, and batched torch
    ops or precomputing where the operators show neither."""
    inputs = batch_inputs(op_names)
    out = []
    if "token ids" in inputs:
        ops = inputs["token ids"]
        out.append(
            Suggestion(
                "Tokenize ahead of the GPU: tokenize the texts once before the loop with the fast "
                "tokenizer's batch call (tokenizer(texts, padding=True, truncation=True, "
                "return_tensors='pt'), or datasets' map(tokenize, batched=True)) and feed batches of "
                "token ids, or tokenize in DataLoader workers with a collate_fn that calls the tokenizer "
                "once per batch",
                f"{condition}; the model reads its input through {', '.join(ops)}, so the host makes ids "
                "(token ids where text is tokenized in the step)",
                ops,
            )
        )
    if "images" in inputs:
        ops = inputs["images"]
        out.append(
            Suggestion(
                "Move the per-batch image work (decoding, augmentation, normalization) to the GPU as "
                "batched torch ops (torchvision.transforms.v2 on CUDA tensors, NVIDIA DALI)",
                f"{condition}; the model reads its input through {', '.join(ops)} (images)",
                ops,
            )
        )
    if not out:
        out.append(
            Suggestion(
                "Move that per-batch work (numpy or Python loops over samples) to the GPU as batched torch "
                "ops, or compute what does not change between epochs once before the loop",
                condition,
            )
        )
    return out


# Python's collector is worth freezing where its time is a quarter of the host time a finding is about.
GC_SHARE = 0.25
# A gc.collect() the script calls is the change where it holds at least half of the collector's time.
EXPLICIT_COLLECT_SHARE = 0.5
# The call that advice moves: a finding giving it is placed at that call (hybrid.analysis.callsites).
GC_COLLECT_CALL = "gc.collect()"


def freeze_gc(
    gc_ms_per_step: float | None,
    gc_collections_per_step: float | None,
    gc_longest_ms: float | None,
    *,
    host_ms: float,
    condition: str,
    collect_site: tuple[str, float] | None = None,
    slow_step_extra_ms: float | None = None,
) -> list[Suggestion]:
    """gc.freeze() after setup, where the injector timed Python's collector (hybrid.inject.gc_watch) at
    GC_SHARE or more of `host_ms` a step; nothing where it was not timed or took less, nor where the
    collector's longest pause is under GC_SHARE of what a slow step adds (`slow_step_extra_ms`), which it
    then cannot be what slows: sentence-transformers' encode loop was told to freeze for 0.059 ms a step
    (longest 0.21 ms) of GC where its slow steps added 3.8 ms, sampled in tokenization. Where a
    gc.collect() the script calls (`collect_site`: its file:line and ms a step) holds most of that time,
    the change is first at that line."""
    if not gc_ms_per_step or gc_ms_per_step < GC_SHARE * host_ms:
        return []
    if slow_step_extra_ms and (gc_longest_ms or 0.0) < GC_SHARE * slow_step_extra_ms:
        return []
    timed = (
        f"Python's garbage collector ran {significant(gc_collections_per_step or 0, 2)} times a step for "
        f"{significant(gc_ms_per_step, 2)} ms (longest {significant(gc_longest_ms or 0, 2)} ms)"
    )
    if collect_site is not None and collect_site[1] >= EXPLICIT_COLLECT_SHARE * gc_ms_per_step:
        site, site_ms = collect_site
        return [
            Suggestion(
                f"Take the {GC_COLLECT_CALL} at {site} out of the loop, or call it less often; "
                "where it must stay, call gc.freeze() once the model and data are built, so it no "
                "longer re-scans them",
                f"{condition}; {timed}, {significant(site_ms, 2)} ms a step of it in the {GC_COLLECT_CALL} "
                f"at {site}",
                moves_call=GC_COLLECT_CALL,
            )
        ]
    return [
        Suggestion(
            "Call gc.freeze() once the model, optimizer and data are built (after a gc.collect()), so "
            "Python's collector stops re-scanning those objects during the steps",
            f"{condition}; {timed}",
        )
    ]
