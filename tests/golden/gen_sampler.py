"""Golden index lists of torch.utils.data.DistributedSampler (shuffle=False), the padding and
drop_last rules brrr's DistributedSampler must reproduce. Written as {name: int64 tensor} with
torch.save into sampler_distributed.pt; names are "n{n}_ws{world_size}_r{rank}_drop{0|1}"."""
import pathlib

import torch
from torch.utils.data import DistributedSampler

CASES = [(10, 3), (10, 4), (7, 7), (3, 5), (16, 4)]


def generate(out_dir: pathlib.Path) -> None:
    tensors = {}
    for n, world_size in CASES:
        for drop_last in (False, True):
            for rank in range(world_size):
                sampler = DistributedSampler(range(n), num_replicas=world_size, rank=rank,
                                             shuffle=False, drop_last=drop_last)
                name = f"n{n}_ws{world_size}_r{rank}_drop{int(drop_last)}"
                tensors[name] = torch.tensor(list(iter(sampler)), dtype=torch.int64)
    torch.save(tensors, out_dir / "sampler_distributed.pt")


if __name__ == "__main__":
    generate(pathlib.Path("."))
