"""The built-in workloads' names, without torch: `hybrid diagnose` checks --model before it imports the
workloads (hybrid.models imports torch: 2.4 s for a mistyped name before this)."""

MODEL_NAMES = ("resnet50", "transformer", "simple_cnn")
