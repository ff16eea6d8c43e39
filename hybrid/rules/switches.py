"""The fixes hybrid can switch on by itself, without editing the user's code: `hybrid run --verify` re-runs
the plain window with one applied (hybrid.inject.apply_fix applies it by `name`) and measures what it
saves. A rule declares the switches of its fix in order (Rule.switches); a switch whose setting the run
already had (the injector's `config`, hybrid.inject.run_config) is never verified, nor one with nothing to
act on (no DataLoader to give workers)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hybrid.rules.advice import RunConfig


@dataclass(frozen=True)
class Switch:
    name: str  # what hybrid.inject.apply_fix applies (`--apply-fix NAME`)
    description: str  # what it switches, in the user's words
    # True where the run already had it on, None where its configuration was not recorded.
    is_on: Callable[[RunConfig], bool | None]
    # Why the switch has nothing to act on in this run (no DataLoader, no optimizer), else None.
    missing: Callable[[RunConfig], str | None] = lambda _config: None
    # Steps the fix's run drops at least before its plain window, where the fix itself needs them to settle.
    min_warmup: int = 0
    # A flag read at every call, or the default-mode compile (hybrid.inject.apply_fix.TOGGLES): its run times
    # the step with and without it in one process (--paired) rather than against the run's plain step, timed
    # in another process.
    paired: bool = False
    # The metric holding the time a step spends in every kernel the switch can change, where it changes
    # nothing else (TF32: the FP32 GEMMs and convolutions); None where it reaches further (a compile also
    # cuts host dispatch). A realized saving beyond it is the windows' own difference
    # (hybrid.analysis.verified.within_reach).
    reach: str | None = None
    # Why the fix's own run shows the switch, though applied, changed nothing (a compile that compiled no
    # graph), from that run's config; its time is then no saving (hybrid.analysis.verified.realized).
    ineffective: Callable[[RunConfig], str | None] = lambda _config: None

    def blocked(self, config: RunConfig) -> str | None:
        """Why this switch is not verified on a run with `config`, or None when it can be."""
        if self.is_on(config) is True:
            return f"{self.description}: already on in this run"
        return self.missing(config)


def _loaders_missing(config: RunConfig) -> str | None:
    return "the script uses no DataLoader" if config.data_loaders == [] else None


def _all_loaders(config: RunConfig, setting: Callable[[dict], bool]) -> bool | None:
    loaders = config.data_loaders
    return None if not loaders else all(setting(loader) for loader in loaders)


def _fusable(config: RunConfig) -> list[dict] | None:
    optimizers = config.optimizers
    return None if optimizers is None else [o for o in optimizers if o.get("supports_fused")]


def _fused_missing(config: RunConfig) -> str | None:
    if config.optimizers == []:
        return "the script builds no optimizer"
    if _fusable(config) == []:
        return "its optimizers have no fused implementation"
    return None


TF32 = Switch(
    "tf32",
    "TF32 for FP32 matmuls and cuDNN convolutions",
    lambda c: None if c.tf32_matmul is None else bool(c.tf32_matmul and c.tf32_conv),
    paired=True,
    reach="gemm_fp32_ms",
)
CUDNN_BENCHMARK = Switch(
    "cudnn_benchmark", "torch.backends.cudnn.benchmark = True", lambda c: c.cudnn_benchmark, paired=True
)
AUTOCAST_BF16 = Switch(
    "autocast_bf16",
    "bf16 autocast around the stepped module",
    lambda c: None if c.autocast_dtypes is None else bool(c.autocast_dtypes),
)
# The stepped module is compiled at its first call (hybrid.inject.apply_fix), compiles at its second, and
# under reduce-overhead CUDA graph trees warm up on the third and record on the fourth call before replaying:
# the fifth step is the first steady one. A stepped function (no module with parameters in the step) is
# compiled after the second step, one step later; the warmup then lasts until step times settle
# (hybrid.load.settle), which covers it.
COMPILED_WARMUP = 4


def _compiled_nothing(config: RunConfig) -> str | None:
    """On the H100 (Python 3.12), two compile fixes called nn.Module.compile() on an nn.Sequential and dynamo
    compiled no graph: their windows ran eager (11.6 against 11.7 ms a step, and a reduce-overhead "saving"
    of -0.5 ms where the replay predicted 1.8), read as the compile's realized saving."""
    if config.graphs_compiled == 0:
        return "torch.compile was applied but compiled no graph in the fix's run: the step ran eager"
    return None


def _graphs_skipped(config: RunConfig) -> str | None:
    """Every graph compiled ran without CUDA graphs (some kept: the window timed part of the fix)."""
    graphs, skips = config.inductor_graphs or config.graphs_compiled, config.cudagraph_skips
    if graphs and skips is not None and skips >= graphs:
        # Inductor warns its reason only for GPU graphs; a CPU graph, which has none, is counted silently.
        reasons = "; ".join(config.cudagraph_skip_reasons) or "no reason given (graphs off the GPU)"
        return f"the step compiled, but inductor ran its {graphs} graph(s) without CUDA graphs: {reasons}"
    return _compiled_nothing(config)


COMPILE = Switch(
    "compile",
    "torch.compile of the stepped module (or function)",
    lambda c: c.compiled,
    min_warmup=COMPILED_WARMUP,
    paired=True,
    ineffective=_compiled_nothing,
)


def _graphs_cannot_hold(config: RunConfig) -> str | None:
    """Graphs of the stepped module leave a Python loop over rows in the script: on the H200 the per-sample
    loss's compiled model ran 11.4 ms a step slower while its replay, which captures every launch, predicted
    52.9 ms saved. Nor can they hold generate()'s dynamic KV cache (RunConfig.decodes_with_dynamic_cache), nor
    settle where the step's shapes change every few steps (RunConfig.shapes_change), nor capture across the
    syncs of data-dependent shapes (RunConfig.data_dependent_syncs)."""
    rows = config.row_loop_rows
    if rows:
        return (
            f"the step's launches come from a Python loop over {rows} rows in the script, which graphs of "
            "the stepped module leave in place"
        )
    if config.decodes_with_dynamic_cache:
        return (
            "each step is a forward of generate() with the dynamic KV cache, which CUDA graphs of the model "
            "cannot hold (a static cache is the fix; --verify does not switch it)"
        )
    if config.shapes_change:
        # A BERT fine-tune padding each batch to its longest sequence compiled and recorded through a
        # 240 s limit on the H100 without a steady window (benchmarks/results/s24_h100).
        return (
            f"{config.shapes_change}: CUDA graphs would compile and record again for each, and no window "
            "would settle (padding to fixed sizes comes first)"
        )
    return config.graphs_stop_at_syncs


COMPILE_REDUCE_OVERHEAD = Switch(
    "compile_reduce_overhead",
    "torch.compile(mode='reduce-overhead') of the stepped module or function (CUDA graphs)",
    lambda c: c.cuda_graphs,
    _graphs_cannot_hold,
    min_warmup=COMPILED_WARMUP,
    ineffective=_graphs_skipped,
)


def _graphs_can_hold(config: RunConfig) -> str | None:
    """The default compile is the launch findings' fix only where the step syncs on data-dependent shapes:
    elsewhere their advice and their replay are CUDA graphs (COMPILE_REDUCE_OVERHEAD)."""
    if config.data_dependent_syncs:
        return None
    return "its advice is CUDA graphs (mode='reduce-overhead'), not the default compile"


# What the launch findings advise where no CUDA graph holds the step (torchvision's Faster R-CNN eval syncs
# on nonzero and masked_select): the default compile, which fuses the small ops but keeps their launches.
COMPILE_ACROSS_SYNCS = Switch(
    COMPILE.name,
    COMPILE.description,
    COMPILE.is_on,
    _graphs_can_hold,
    min_warmup=COMPILED_WARMUP,
    paired=True,
)
LOADER_WORKERS = Switch(
    "loader_workers",
    "DataLoader workers (num_workers, persistent_workers; pin_memory on CUDA)",
    lambda c: _all_loaders(c, lambda d: bool(d.get("num_workers")) and bool(d.get("persistent_workers"))),
    _loaders_missing,
)


def _pin_missing(config: RunConfig) -> str | None:
    """Pinning pays only where workers build the batches (RunConfig.pins_without_workers); the workers switch
    pins with them."""
    if config.pins_without_workers:
        return "its DataLoaders have num_workers=0, where pinning runs on the main thread inside the step"
    return _loaders_missing(config)


LOADER_PIN_MEMORY = Switch(
    "loader_pin_memory",
    "DataLoader(pin_memory=True)",
    lambda c: _all_loaders(c, lambda d: bool(d.get("pin_memory"))),
    _pin_missing,
)
FUSED_OPTIMIZER = Switch(
    "fused_optimizer",
    "the optimizer's fused implementation (fused=True)",
    lambda c: None if not _fusable(c) else all(o.get("fused") for o in _fusable(c) or []),
    _fused_missing,
)


def switch_for(switches: tuple[Switch, ...], config: RunConfig) -> Switch | None:
    """The switch a rule's fix is verified (and its replay corrected) with in a run with `config`: the
    first of its switches the run did not have on and has something to act on."""
    return next((switch for switch in switches if switch.blocked(config) is None), None)


SWITCHES: tuple[Switch, ...] = (
    TF32,
    CUDNN_BENCHMARK,
    AUTOCAST_BF16,
    COMPILE,
    COMPILE_REDUCE_OVERHEAD,
    LOADER_WORKERS,
    LOADER_PIN_MEMORY,
    FUSED_OPTIMIZER,
)
