# assignment: 10_worker_failure
# grade_id: checkpoint
# design: a flat directory of per-step, per-rank files and one manifest that rank 0 rewrites atomically (read-modify-replace) to commit a step; a load never lists the directory: it reads the manifest by name and the ranks agree on its latest step with an all_reduce MIN
def save_checkpoint(directory: str, step: int, model: nn.Module, optimizer: torch.optim.Optimizer,
                    cursor: dict, scaler: torch.amp.GradScaler | None = None) -> None:
    """Collective: per-rank files renamed into place, then rank 0 adds the step to the manifest."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    rng = np.random.get_state()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "cursor": dict(cursor),
             "scaler": None if scaler is None else scaler.state_dict(),
             "rng": [torch.get_rng_state(), random.getstate(),
                     [rng[0], torch.from_numpy(rng[1].astype(np.int64)), rng[2], rng[3], rng[4]]]}
    _replace_with(state, _file(directory, step, rank))
    dist.barrier()
    if rank == 0:
        manifest = _manifest(directory) or {"world_sizes": {}}
        manifest["world_sizes"][step] = world_size
        _replace_with(manifest, os.path.join(directory, "MANIFEST.pt"))
    dist.barrier()


def load_checkpoint(directory: str, model: nn.Module, optimizer: torch.optim.Optimizer,
                    scaler: torch.amp.GradScaler | None = None) -> dict | None:
    """Every rank reads the manifest; the ranks agree on the step (all_reduce MIN) and restore it."""
    manifest = _manifest(directory)
    step = torch.tensor([max(manifest["world_sizes"]) if manifest else -1])
    dist.all_reduce(step, op=dist.ReduceOp.MIN)
    if step.item() < 0:
        return None
    step = int(step.item())
    saved_world = manifest["world_sizes"][step]
    same = saved_world == dist.get_world_size()
    state = torch.load(_file(directory, step, dist.get_rank() if same else 0), weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    if scaler is not None and state["scaler"] is not None:
        scaler.load_state_dict(state["scaler"])
    if same:
        torch_rng, python_rng, numpy_rng = state["rng"]
        torch.set_rng_state(torch_rng)
        random.setstate(python_rng)
        np.random.set_state((numpy_rng[0], numpy_rng[1].numpy().astype(np.uint32), *numpy_rng[2:]))
    return {"step": step, "cursor": state["cursor"], "world_size": saved_world}


def _file(directory: str, step: int, rank: int) -> str:
    return os.path.join(directory, f"s{step}-r{rank}.pt")


def _manifest(directory: str) -> dict | None:
    path = os.path.join(directory, "MANIFEST.pt")
    return torch.load(path, weights_only=True) if os.path.exists(path) else None


def _replace_with(obj, path: str) -> None:
    torch.save(obj, f"{path}.partial")
    os.replace(f"{path}.partial", path)
