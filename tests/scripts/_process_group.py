"""The process group of the torchrun test scripts (ddp_train.py, fsdp_train.py): NCCL with one GPU per rank
(cuda:LOCAL_RANK) for --device cuda, else gloo on the CPU."""

import os

import torch
import torch.distributed as dist


def init(device_name: str) -> torch.device:
    """Join the job's process group; the device this rank computes on."""
    if device_name == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        torch.backends.cuda.matmul.allow_tf32 = True
        dist.init_process_group("nccl", device_id=device)
        return device
    dist.init_process_group("gloo")
    torch.set_num_threads(1)  # two ranks share two cores
    return torch.device("cpu")
